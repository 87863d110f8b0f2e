//! Answers of the peer listener, signed by the replica that gives them and
//! bound to the request they answer (its MAC), so that a sender acts only
//! on answers from a replica holding the secret, to this very request: a
//! forged or replayed `409` or `421` changes nothing. The signature is in
//! headers and covers the status, the answering instance, the body length
//! and hash, so a sender checks it before reading the body.

use super::signature::{
    same_mac, sha256, AnswerEnvelope, Key, PEER_BODY_HEADER, PEER_ID_HEADER, PEER_SIGNATURE_HEADER,
};

/// An answer's header-level signature, verified; the body remains to be
/// checked against it ([`VerifiedHead::matches`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedHead {
    /// The answering replica instance.
    pub responder: String,
    /// The signed body length.
    pub length: u64,
    body_sha256: [u8; 32],
}

impl VerifiedHead {
    /// Whether `body` is the body signed.
    pub fn matches(&self, body: &[u8]) -> bool {
        body.len() as u64 == self.length && sha256(body) == self.body_sha256
    }
}

/// The headers signing an answer of `status` with `body`, from
/// `responder`, to the request whose MAC is `request`.
pub fn seal(
    key: &Key,
    request: &[u8; 32],
    status: u16,
    responder: &str,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let envelope = AnswerEnvelope {
        status,
        responder: responder.to_owned(),
        length: body.len() as u64,
        body_sha256: sha256(body),
    };
    let mac = key.answer_mac(request, &envelope);
    vec![
        (PEER_ID_HEADER, envelope.responder),
        (PEER_BODY_HEADER, hex::encode(envelope.body_sha256)),
        (PEER_SIGNATURE_HEADER, hex::encode(mac)),
    ]
}

/// Checks the headers of an answer of `status` with a body of `length`
/// bytes (its `Content-Length`) to the request whose MAC is `request`;
/// `None` when they are missing or do not match.
pub fn open<'a>(
    key: &Key,
    request: &[u8; 32],
    status: u16,
    get: impl Fn(&str) -> Option<&'a str>,
    length: Option<u64>,
) -> Option<VerifiedHead> {
    let length = length?;
    let responder = get(PEER_ID_HEADER)?.trim();
    if !super::envelope::valid_id(responder) {
        return None;
    }
    let mut body_sha256 = [0u8; 32];
    hex::decode_to_slice(get(PEER_BODY_HEADER)?.trim(), &mut body_sha256).ok()?;
    let mut mac = [0u8; 32];
    hex::decode_to_slice(get(PEER_SIGNATURE_HEADER)?.trim(), &mut mac).ok()?;
    let envelope = AnswerEnvelope {
        status,
        responder: responder.to_owned(),
        length,
        body_sha256,
    };
    if !same_mac(&key.answer_mac(request, &envelope), &mac) {
        return None;
    }
    Some(VerifiedHead {
        responder: envelope.responder,
        length,
        body_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn open_map(
        key: &Key,
        request: &[u8; 32],
        status: u16,
        map: &HashMap<&'static str, String>,
        length: u64,
    ) -> Option<VerifiedHead> {
        open(
            key,
            request,
            status,
            |n| map.get(n).map(String::as_str),
            Some(length),
        )
    }

    #[test]
    fn only_the_signed_answer_to_this_request_opens() {
        let key = Key::new(b"0123456789abcdef-shared");
        let request = [7u8; 32];
        let body = b"snapshot";
        let map: HashMap<_, _> = seal(&key, &request, 200, "replica-b", body)
            .into_iter()
            .collect();
        let head = open_map(&key, &request, 200, &map, 8).expect("authentic");
        assert_eq!(head.responder, "replica-b");
        assert!(head.matches(body));
        assert!(!head.matches(b"snapshoT"));
        assert!(!head.matches(b"snapshot!"));
        // Another status, request, length or key: not authentic.
        assert!(open_map(&key, &request, 409, &map, 8).is_none());
        assert!(open_map(&key, &[8u8; 32], 200, &map, 8).is_none());
        assert!(open_map(&key, &request, 200, &map, 9).is_none());
        let other = Key::new(b"another secret of the same size");
        assert!(open_map(&other, &request, 200, &map, 8).is_none());
        // An unsigned answer, or one without a length.
        assert!(open_map(&key, &request, 200, &HashMap::new(), 8).is_none());
        assert!(open(
            &key,
            &request,
            200,
            |n| map.get(n).map(String::as_str),
            None
        )
        .is_none());
        let mut renamed = map.clone();
        renamed.insert(PEER_ID_HEADER, "replica-c".into());
        assert!(open_map(&key, &request, 200, &renamed, 8).is_none());
    }
}
