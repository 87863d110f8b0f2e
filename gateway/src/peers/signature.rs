//! The MACs of the peer protocol: HMAC-SHA256 keyed with the secret all
//! replicas of a deployment share, over a request's envelope
//! ([`super::envelope`]) and over an answer bound to the request it
//! answers ([`super::answer`]). Requests and answers are signed under
//! different labels, so that neither can be presented as the other.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Header naming the sending replica instance (on requests) or the
/// answering one (on answers).
pub const PEER_ID_HEADER: &str = "x-flexinfer-peer-id";
/// Header naming the replica instance a request is addressed to (empty
/// on `hello`).
pub const PEER_TO_HEADER: &str = "x-flexinfer-peer-to";
/// Header with the sender's clock, milliseconds since the Unix epoch.
pub const PEER_TIME_HEADER: &str = "x-flexinfer-peer-time";
/// Header with the sender instance's sequence number of the request.
pub const PEER_SEQ_HEADER: &str = "x-flexinfer-peer-seq";
/// Header with the hex SHA-256 of the body.
pub const PEER_BODY_HEADER: &str = "x-flexinfer-peer-body-sha256";
/// Header with the hex HMAC-SHA256.
pub const PEER_SIGNATURE_HEADER: &str = "x-flexinfer-peer-signature";

/// Largest difference accepted between the sender's and the receiver's
/// clocks.
pub const MAX_SKEW: Duration = Duration::from_secs(30);

/// Shortest secret accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 16;

const BLOCK: usize = 64;
const REQUEST_LABEL: &[u8] = b"flexinfer-peer-v2 request\n";
const ANSWER_LABEL: &[u8] = b"flexinfer-peer-v2 answer\n";

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

/// What a request's MAC covers besides its method and path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The sending replica instance.
    pub sender: String,
    /// The replica instance addressed (empty on `hello`).
    pub receiver: String,
    /// Sender's clock, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The sender instance's sequence number, from 1, never reused.
    pub seq: u64,
    /// Body length in bytes.
    pub length: u64,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
}

/// What an answer's MAC covers besides the request it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerEnvelope {
    /// HTTP status.
    pub status: u16,
    /// The answering replica instance.
    pub responder: String,
    /// Body length in bytes.
    pub length: u64,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
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

    /// The MAC of a request. Ids, method and path hold no newline (the
    /// envelope parser refuses them), so the fields cannot run together.
    pub fn request_mac(&self, method: &str, path: &str, envelope: &Envelope) -> [u8; 32] {
        let numbers = format!(
            "{}\n{}\n{}\n",
            envelope.time_ms, envelope.seq, envelope.length
        );
        self.mac(&[
            REQUEST_LABEL,
            method.as_bytes(),
            b"\n",
            path.as_bytes(),
            b"\n",
            envelope.sender.as_bytes(),
            b"\n",
            envelope.receiver.as_bytes(),
            b"\n",
            numbers.as_bytes(),
            &envelope.body_sha256,
        ])
    }

    /// The MAC of an answer to the request whose MAC is `request`.
    pub fn answer_mac(&self, request: &[u8; 32], answer: &AnswerEnvelope) -> [u8; 32] {
        let numbers = format!("{}\n{}\n", answer.status, answer.length);
        self.mac(&[
            ANSWER_LABEL,
            request,
            b"\n",
            answer.responder.as_bytes(),
            b"\n",
            numbers.as_bytes(),
            &answer.body_sha256,
        ])
    }
}

/// Whether two MACs are equal, in constant time.
pub fn same_mac(a: &[u8; 32], b: &[u8; 32]) -> bool {
    bool::from(a.ct_eq(b))
}

/// SHA-256 of `body`.
pub fn sha256(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
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

    fn envelope() -> Envelope {
        Envelope {
            sender: "replica-a".into(),
            receiver: "replica-b".into(),
            time_ms: 1_000,
            seq: 7,
            length: 4,
            body_sha256: sha256(b"body"),
        }
    }

    #[test]
    fn every_field_of_a_request_is_signed() {
        let key = Key::new(b"0123456789abcdef-shared");
        let base = envelope();
        let mac = key.request_mac("POST", "/p", &base);
        assert_eq!(mac, key.request_mac("POST", "/p", &base));
        assert_ne!(mac, key.request_mac("GET", "/p", &base));
        assert_ne!(mac, key.request_mac("POST", "/q", &base));
        let changes: [fn(&mut Envelope); 6] = [
            |e| e.sender.push('x'),
            |e| e.receiver.clear(),
            |e| e.time_ms += 1,
            |e| e.seq += 1,
            |e| e.length += 1,
            |e| e.body_sha256[0] ^= 1,
        ];
        for change in changes {
            let mut other = base.clone();
            change(&mut other);
            assert_ne!(mac, key.request_mac("POST", "/p", &other), "{other:?}");
        }
        let other_key = Key::new(b"another secret of the same size");
        assert_ne!(mac, other_key.request_mac("POST", "/p", &base));
    }

    #[test]
    fn answers_are_bound_to_their_request_and_differ_from_requests() {
        let key = Key::new(b"0123456789abcdef-shared");
        let request = key.request_mac("GET", "/p", &envelope());
        let other_request = key.request_mac(
            "GET",
            "/p",
            &Envelope {
                seq: 8,
                ..envelope()
            },
        );
        let answer = AnswerEnvelope {
            status: 204,
            responder: "replica-b".into(),
            length: 0,
            body_sha256: sha256(b""),
        };
        let mac = key.answer_mac(&request, &answer);
        assert_ne!(mac, key.answer_mac(&other_request, &answer));
        let forged = AnswerEnvelope {
            status: 409,
            ..answer.clone()
        };
        assert_ne!(mac, key.answer_mac(&request, &forged));
        assert!(same_mac(&mac, &key.answer_mac(&request, &answer)));
        assert!(!same_mac(&mac, &request));
    }
}
