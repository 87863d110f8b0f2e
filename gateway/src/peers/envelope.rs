//! A peer request's signature, carried in headers so that the receiver
//! can check it before reading the body: sender and receiver instances,
//! time, sequence number, body length and body hash, and the HMAC over
//! them, the method and the path ([`super::signature`]).

use super::keyring::{KeySet, MAX_KEYS};
use super::refusal::Refusal;
use super::signature::{
    now_ms, same_mac, sha256, Envelope, Key, MAX_SKEW, PEER_BODY_HEADER, PEER_ID_HEADER,
    PEER_SEQ_HEADER, PEER_SIGNATURE_HEADER, PEER_TIME_HEADER, PEER_TO_HEADER,
};

/// Longest replica instance id accepted.
pub const MAX_ID_LEN: usize = 128;

/// A request's envelope and its MACs: one per key of the sender's
/// [`KeySet`] (two while a changed secret's grace period lasts), in the
/// signature header separated by commas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedRequest {
    /// What the MACs cover besides the method and path.
    pub envelope: Envelope,
    /// The HMACs, current key first.
    pub macs: Vec<[u8; 32]>,
}

/// A request signature that verified: the receiver's key that checked it
/// and the MAC it checked, which the answer is signed with and bound to.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The key (boxed: refusals carry this, and stay small).
    pub key: Box<Key>,
    /// The request's MAC under it.
    pub mac: [u8; 32],
}

impl SignedRequest {
    /// Signs `method path` with `body`, from `sender` to `receiver`, as
    /// the sender's request number `seq`, now.
    pub fn new(
        keys: &KeySet,
        (method, path): (&str, &str),
        (sender, receiver): (&str, &str),
        seq: u64,
        body: &[u8],
    ) -> Self {
        let envelope = Envelope {
            sender: sender.to_owned(),
            receiver: receiver.to_owned(),
            time_ms: now_ms(),
            seq,
            length: body.len() as u64,
            body_sha256: sha256(body),
        };
        Self::sign(keys, (method, path), envelope)
    }

    /// Signs `method path` with `envelope` as it is, under every key.
    pub fn sign(keys: &KeySet, (method, path): (&str, &str), envelope: Envelope) -> Self {
        let macs = keys
            .keys()
            .iter()
            .map(|key| key.request_mac(method, path, &envelope))
            .collect();
        SignedRequest { envelope, macs }
    }

    /// The headers carrying the signature, `Content-Length` included.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let e = &self.envelope;
        vec![
            (PEER_ID_HEADER, e.sender.clone()),
            (PEER_TO_HEADER, e.receiver.clone()),
            (PEER_TIME_HEADER, e.time_ms.to_string()),
            (PEER_SEQ_HEADER, e.seq.to_string()),
            (PEER_BODY_HEADER, hex::encode(e.body_sha256)),
            (PEER_SIGNATURE_HEADER, self.signature_header()),
            ("content-length", e.length.to_string()),
        ]
    }

    fn signature_header(&self) -> String {
        let hexes: Vec<String> = self.macs.iter().map(hex::encode).collect();
        hexes.join(",")
    }

    /// Reads the signature headers through `get`; `length` is the body
    /// length the request declares.
    pub fn parse<'a>(get: impl Fn(&str) -> Option<&'a str>, length: u64) -> Result<Self, Refusal> {
        let field = |name: &str| get(name).map(str::trim).ok_or(Refusal::Unsigned);
        let sender = field(PEER_ID_HEADER)?;
        let receiver = get(PEER_TO_HEADER).map_or("", str::trim);
        if !valid_id(sender) || !(receiver.is_empty() || valid_id(receiver)) {
            return Err(Refusal::Unsigned);
        }
        let number = |name: &str| -> Result<u64, Refusal> {
            let text = field(name)?;
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Refusal::Unsigned);
            }
            text.parse().map_err(|_| Refusal::Unsigned)
        };
        let time_ms = number(PEER_TIME_HEADER)?;
        let seq = number(PEER_SEQ_HEADER)?;
        let mut body_sha256 = [0u8; 32];
        hex::decode_to_slice(field(PEER_BODY_HEADER)?, &mut body_sha256)
            .map_err(|_| Refusal::Unsigned)?;
        let mut macs = Vec::with_capacity(MAX_KEYS);
        for text in field(PEER_SIGNATURE_HEADER)?.split(',') {
            let mut mac = [0u8; 32];
            hex::decode_to_slice(text.trim(), &mut mac).map_err(|_| Refusal::Unsigned)?;
            if macs.len() == MAX_KEYS {
                return Err(Refusal::Unsigned);
            }
            macs.push(mac);
        }
        Ok(SignedRequest {
            envelope: Envelope {
                sender: sender.to_owned(),
                receiver: receiver.to_owned(),
                time_ms,
                seq,
                length,
                body_sha256,
            },
            macs,
        })
    }

    /// Checks the time window at `now_ms` and that one MAC of `method
    /// path` verifies under one of `keys`.
    pub fn verify(
        &self,
        keys: &KeySet,
        (method, path): (&str, &str),
        now_ms: u64,
    ) -> Result<Verified, Refusal> {
        if self.envelope.time_ms.abs_diff(now_ms) > MAX_SKEW.as_millis() as u64 {
            return Err(Refusal::Stale);
        }
        for key in keys.keys() {
            let expected = key.request_mac(method, path, &self.envelope);
            if let Some(mac) = self.macs.iter().find(|mac| same_mac(&expected, mac)) {
                return Ok(Verified {
                    key: Box::new(key.clone()),
                    mac: *mac,
                });
            }
        }
        Err(Refusal::BadSignature)
    }

    /// The pairs of the sender's key and the MAC it made, in signing order.
    pub fn pairs<'a>(&'a self, keys: &'a KeySet) -> impl Iterator<Item = (&'a Key, &'a [u8; 32])> {
        keys.keys().iter().zip(self.macs.iter())
    }
}

/// Whether `id` can name a replica instance: 1 to [`MAX_ID_LEN`] ASCII
/// letters, digits, `-`, `.` or `_`.
pub fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const ROUTE: (&str, &str) = ("POST", "/peer/v2/records");

    fn headers(req: &SignedRequest) -> HashMap<&'static str, String> {
        req.headers().into_iter().collect()
    }

    fn parse(map: &HashMap<&'static str, String>) -> Result<SignedRequest, Refusal> {
        let length = map
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        SignedRequest::parse(|name| map.get(name).map(String::as_str), length)
    }

    #[test]
    fn headers_round_trip_and_verify() {
        let key = KeySet::from_keys(vec![Key::new(b"0123456789abcdef-shared")]);
        let req = SignedRequest::new(&key, ROUTE, ("replica-a", "replica-b"), 3, b"body");
        let parsed = parse(&headers(&req)).unwrap();
        assert_eq!(parsed, req);
        let now = req.envelope.time_ms;
        assert_eq!(
            parsed.verify(&key, ROUTE, now).map(|v| v.mac),
            Ok(req.macs[0])
        );
        assert_eq!(
            parsed
                .verify(&key, ("POST", "/peer/v2/snapshot"), now)
                .map(|v| v.mac),
            Err(Refusal::BadSignature)
        );
        let other = KeySet::from_keys(vec![Key::new(b"another secret of the same size")]);
        assert_eq!(
            parsed.verify(&other, ROUTE, now).map(|v| v.mac),
            Err(Refusal::BadSignature)
        );
        let skew = MAX_SKEW.as_millis() as u64 + 1;
        assert_eq!(
            parsed.verify(&key, ROUTE, now + skew).map(|v| v.mac),
            Err(Refusal::Stale)
        );
        assert_eq!(
            parsed.verify(&key, ROUTE, now - skew).map(|v| v.mac),
            Err(Refusal::Stale)
        );
    }

    #[test]
    fn every_signed_header_is_checked() {
        let key = KeySet::from_keys(vec![Key::new(b"0123456789abcdef-shared")]);
        let req = SignedRequest::new(&key, ROUTE, ("replica-a", "replica-b"), 3, b"body");
        let now = req.envelope.time_ms;
        let changes = [
            (PEER_ID_HEADER, "replica-c".to_string()),
            (PEER_TO_HEADER, "replica-c".to_string()),
            (PEER_TIME_HEADER, (now + 1).to_string()),
            (PEER_SEQ_HEADER, "4".to_string()),
            (PEER_BODY_HEADER, hex::encode(sha256(b"bodz"))),
            ("content-length", "5".to_string()),
        ];
        for (name, value) in changes {
            let mut map = headers(&req);
            map.insert(name, value);
            let parsed = parse(&map).unwrap();
            assert_eq!(
                parsed.verify(&key, ROUTE, now).map(|v| v.mac),
                Err(Refusal::BadSignature),
                "{name}"
            );
        }
    }

    #[test]
    fn while_a_secret_changes_either_key_verifies_and_the_answer_uses_it() {
        let (old, new) = (
            Key::new(b"the secret before the change"),
            Key::new(b"the secret after the change"),
        );
        let both = KeySet::from_keys(vec![new.clone(), old.clone()]);
        let req = SignedRequest::new(&both, ROUTE, ("replica-a", "replica-b"), 3, b"body");
        let parsed = parse(&headers(&req)).unwrap();
        assert_eq!(parsed.macs.len(), 2);
        let now = req.envelope.time_ms;
        // A receiver still on the old secret, and one already on the new.
        for (receiver, index) in [(old, 1), (new, 0)] {
            let verified = parsed
                .verify(&KeySet::from_keys(vec![receiver.clone()]), ROUTE, now)
                .unwrap();
            assert_eq!(verified.mac, req.macs[index]);
            assert_eq!(verified.key.mac(&[b"probe"]), receiver.mac(&[b"probe"]));
        }
        // A third MAC is not a signature: at most two keys sign.
        let mut map = headers(&req);
        let three = format!(
            "{},{}",
            map[PEER_SIGNATURE_HEADER],
            hex::encode(req.macs[0])
        );
        map.insert(PEER_SIGNATURE_HEADER, three);
        assert_eq!(parse(&map), Err(Refusal::Unsigned));
    }

    #[test]
    fn missing_or_garbled_headers_are_unsigned() {
        let key = KeySet::from_keys(vec![Key::new(b"0123456789abcdef-shared")]);
        let req = SignedRequest::new(&key, ROUTE, ("replica-a", "replica-b"), 3, b"");
        for name in [
            PEER_ID_HEADER,
            PEER_TIME_HEADER,
            PEER_SEQ_HEADER,
            PEER_BODY_HEADER,
            PEER_SIGNATURE_HEADER,
        ] {
            let mut map = headers(&req);
            map.remove(name);
            assert_eq!(parse(&map), Err(Refusal::Unsigned), "{name} missing");
            map.insert(name, "z z".into());
            assert_eq!(parse(&map), Err(Refusal::Unsigned), "{name} garbled");
        }
        let mut map = headers(&req);
        map.insert(PEER_SEQ_HEADER, "+5".into());
        assert_eq!(parse(&map), Err(Refusal::Unsigned));
        map.insert(PEER_SEQ_HEADER, "99999999999999999999999".into());
        assert_eq!(parse(&map), Err(Refusal::Unsigned));
        let mut map = headers(&req);
        map.insert(PEER_ID_HEADER, "a".repeat(MAX_ID_LEN + 1));
        assert_eq!(parse(&map), Err(Refusal::Unsigned));
        // No receiver is allowed (hello), and reads as empty.
        let mut map = headers(&req);
        map.remove(PEER_TO_HEADER);
        assert_eq!(parse(&map).unwrap().envelope.receiver, "");
    }
}
