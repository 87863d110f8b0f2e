//! Why the peer listener refused a request: the status and OpenAI-style
//! error it answers, and the reason it is counted under.

use crate::errors::ApiError;

/// Why a peer request was refused. Every refusal changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a path of the peer protocol.
    NotFound,
    /// A path of the previous protocol (`/peer/v1/…`).
    OldProtocol,
    /// A body without a declared length (chunked, or no `Content-Length`).
    LengthRequired,
    /// A declared length over the path's limit.
    TooLarge,
    /// A signature header is missing or unreadable.
    Unsigned,
    /// The timestamp is outside the accepted window.
    Stale,
    /// The HMAC does not match.
    BadSignature,
    /// Addressed to another instance (this replica restarted since).
    WrongReceiver,
    /// This sender instance's sequence number was seen already.
    Replayed,
    /// The sender is this replica.
    Myself,
    /// Too many sender instances are remembered to take a new one.
    Busy,
    /// This replica has not loaded the shared secret yet (it starts, or
    /// its Secret is not filled yet): nothing can be checked.
    NoSecret,
    /// The body did not arrive within the deadline.
    BodyTimeout,
    /// The body is not the one signed (length or hash).
    BodyMismatch,
    /// The body could not be read.
    Unreadable,
    /// The body is not a records body.
    Malformed,
}

impl Refusal {
    /// Every reason, for tests and documentation.
    pub const ALL: [Refusal; 16] = [
        Refusal::NotFound,
        Refusal::OldProtocol,
        Refusal::LengthRequired,
        Refusal::TooLarge,
        Refusal::Unsigned,
        Refusal::Stale,
        Refusal::BadSignature,
        Refusal::WrongReceiver,
        Refusal::Replayed,
        Refusal::Myself,
        Refusal::Busy,
        Refusal::NoSecret,
        Refusal::BodyTimeout,
        Refusal::BodyMismatch,
        Refusal::Unreadable,
        Refusal::Malformed,
    ];

    /// The label of `flexinfer_proxy_routing_peer_rejected_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::NotFound => "not_found",
            Refusal::OldProtocol => "old_protocol",
            Refusal::LengthRequired => "no_length",
            Refusal::TooLarge => "too_large",
            Refusal::Unsigned => "unsigned",
            Refusal::Stale => "stale",
            Refusal::BadSignature => "bad_signature",
            Refusal::WrongReceiver => "wrong_receiver",
            Refusal::Replayed => "replayed",
            Refusal::Myself => "self",
            Refusal::Busy => "busy",
            Refusal::NoSecret => "no_secret",
            Refusal::BodyTimeout => "body_timeout",
            Refusal::BodyMismatch => "body_mismatch",
            Refusal::Unreadable => "unreadable",
            Refusal::Malformed => "malformed",
        }
    }

    /// The coarser result of `flexinfer_proxy_routing_peer_requests_total`.
    pub fn class(self) -> &'static str {
        match self {
            Refusal::NotFound => "not_found",
            Refusal::OldProtocol
            | Refusal::Unsigned
            | Refusal::Stale
            | Refusal::BadSignature
            | Refusal::WrongReceiver
            | Refusal::Replayed => "unauthorized",
            Refusal::Myself => "self",
            Refusal::Busy | Refusal::NoSecret => "busy",
            Refusal::LengthRequired
            | Refusal::TooLarge
            | Refusal::BodyTimeout
            | Refusal::BodyMismatch
            | Refusal::Unreadable
            | Refusal::Malformed => "malformed",
        }
    }

    /// The error answered.
    pub fn error(self) -> ApiError {
        let (status, kind, code, message) = match self {
            Refusal::NotFound => (
                404,
                "not_found_error",
                "not_found",
                "Not a path of the peer protocol",
            ),
            Refusal::OldProtocol => (
                426,
                "invalid_request_error",
                "peer_protocol_outdated",
                "This replica speaks peer protocol v2 (/peer/v2/...): the sender runs an older release",
            ),
            Refusal::LengthRequired => (
                411,
                "invalid_request_error",
                "length_required",
                "Peer requests need a Content-Length and no Transfer-Encoding",
            ),
            Refusal::TooLarge => (
                413,
                "invalid_request_error",
                "request_too_large",
                "Peer request body over the limit of this path",
            ),
            Refusal::Unsigned => (
                401,
                "invalid_request_error",
                "peer_signature_missing",
                "Missing or malformed peer signature headers",
            ),
            Refusal::Stale => (
                401,
                "invalid_request_error",
                "peer_message_stale",
                "Peer message timestamp outside the accepted window",
            ),
            Refusal::BadSignature => (
                401,
                "invalid_request_error",
                "peer_signature_invalid",
                "Invalid peer signature",
            ),
            Refusal::WrongReceiver => (
                421,
                "invalid_request_error",
                "peer_wrong_receiver",
                "Peer message addressed to another instance of this replica: say hello again",
            ),
            Refusal::Replayed => (
                409,
                "invalid_request_error",
                "peer_message_replayed",
                "Peer message already received (sequence number seen): nothing changed",
            ),
            Refusal::Myself => (
                409,
                "invalid_request_error",
                "peer_is_self",
                "The sender is this replica",
            ),
            Refusal::Busy => (
                503,
                "service_unavailable_error",
                "peer_senders_full",
                "Too many peer instances remembered, please retry",
            ),
            Refusal::NoSecret => (
                503,
                "service_unavailable_error",
                "peer_secret_not_loaded",
                "This replica has not loaded the shared secret yet, please retry",
            ),
            Refusal::BodyTimeout => (
                408,
                "invalid_request_error",
                "request_timeout",
                "Peer request body not received in time",
            ),
            Refusal::BodyMismatch => (
                400,
                "invalid_request_error",
                "peer_body_mismatch",
                "Peer request body differs from the signed one",
            ),
            Refusal::Unreadable => (
                400,
                "invalid_request_error",
                "invalid_request_error",
                "Unreadable peer request body",
            ),
            Refusal::Malformed => (
                400,
                "invalid_request_error",
                "peer_records_malformed",
                "Malformed peer records",
            ),
        };
        ApiError {
            status,
            kind,
            code,
            message: message.to_owned(),
            param: None,
            retry_after: (status == 503).then_some(1),
            extra: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_an_error_answer_with_its_own_reason() {
        let mut reasons = std::collections::HashSet::new();
        for refusal in Refusal::ALL {
            let err = refusal.error();
            assert!((400..600).contains(&err.status), "{refusal:?}");
            let body: serde_json::Value = serde_json::from_slice(&err.body()).unwrap();
            assert_eq!(body["error"]["code"], err.code);
            assert!(reasons.insert(refusal.reason()), "{refusal:?}");
        }
        assert_eq!(Refusal::Replayed.error().status, 409);
        assert_eq!(Refusal::Replayed.class(), "unauthorized");
    }
}
