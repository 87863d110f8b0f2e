//! A peer request's signature, carried in headers so that the receiver
//! can check it before reading the body: sender and receiver instances,
//! time, sequence number, body length and body hash, and the HMAC over
//! them, the method and the path ([`super::signature`]).

use super::refusal::Refusal;
use super::signature::{
    now_ms, same_mac, sha256, Envelope, Key, MAX_SKEW, PEER_BODY_HEADER, PEER_ID_HEADER,
    PEER_SEQ_HEADER, PEER_SIGNATURE_HEADER, PEER_TIME_HEADER, PEER_TO_HEADER,
};

/// Longest replica instance id accepted.
pub const MAX_ID_LEN: usize = 128;

/// A request's envelope and its MAC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedRequest {
    /// What the MAC covers besides the method and path.
    pub envelope: Envelope,
    /// The HMAC.
    pub mac: [u8; 32],
}

impl SignedRequest {
    /// Signs `method path` with `body`, from `sender` to `receiver`, as
    /// the sender's request number `seq`, now.
    pub fn new(
        key: &Key,
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
        Self::sign(key, (method, path), envelope)
    }

    /// Signs `method path` with `envelope` as it is.
    pub fn sign(key: &Key, (method, path): (&str, &str), envelope: Envelope) -> Self {
        let mac = key.request_mac(method, path, &envelope);
        SignedRequest { envelope, mac }
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
            (PEER_SIGNATURE_HEADER, hex::encode(self.mac)),
            ("content-length", e.length.to_string()),
        ]
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
        let mut mac = [0u8; 32];
        hex::decode_to_slice(field(PEER_SIGNATURE_HEADER)?, &mut mac)
            .map_err(|_| Refusal::Unsigned)?;
        Ok(SignedRequest {
            envelope: Envelope {
                sender: sender.to_owned(),
                receiver: receiver.to_owned(),
                time_ms,
                seq,
                length,
                body_sha256,
            },
            mac,
        })
    }

    /// Checks the time window at `now_ms` and the MAC of `method path`.
    pub fn verify(
        &self,
        key: &Key,
        (method, path): (&str, &str),
        now_ms: u64,
    ) -> Result<(), Refusal> {
        if self.envelope.time_ms.abs_diff(now_ms) > MAX_SKEW.as_millis() as u64 {
            return Err(Refusal::Stale);
        }
        let expected = key.request_mac(method, path, &self.envelope);
        if same_mac(&expected, &self.mac) {
            Ok(())
        } else {
            Err(Refusal::BadSignature)
        }
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
        let key = Key::new(b"0123456789abcdef-shared");
        let req = SignedRequest::new(&key, ROUTE, ("replica-a", "replica-b"), 3, b"body");
        let parsed = parse(&headers(&req)).unwrap();
        assert_eq!(parsed, req);
        let now = req.envelope.time_ms;
        assert_eq!(parsed.verify(&key, ROUTE, now), Ok(()));
        assert_eq!(
            parsed.verify(&key, ("POST", "/peer/v2/snapshot"), now),
            Err(Refusal::BadSignature)
        );
        let other = Key::new(b"another secret of the same size");
        assert_eq!(
            parsed.verify(&other, ROUTE, now),
            Err(Refusal::BadSignature)
        );
        let skew = MAX_SKEW.as_millis() as u64 + 1;
        assert_eq!(parsed.verify(&key, ROUTE, now + skew), Err(Refusal::Stale));
        assert_eq!(parsed.verify(&key, ROUTE, now - skew), Err(Refusal::Stale));
    }

    #[test]
    fn every_signed_header_is_checked() {
        let key = Key::new(b"0123456789abcdef-shared");
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
                parsed.verify(&key, ROUTE, now),
                Err(Refusal::BadSignature),
                "{name}"
            );
        }
    }

    #[test]
    fn missing_or_garbled_headers_are_unsigned() {
        let key = Key::new(b"0123456789abcdef-shared");
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
