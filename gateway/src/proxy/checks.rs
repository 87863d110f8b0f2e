//! The checks every proxied request passes before its model is looked at:
//! a framing the gateway forwards faithfully, the API key and the global
//! rate limit.

use http::header;
use pingora_http::RequestHeader;

use std::sync::Arc;

use super::headers::parsed;
use super::Gateway;
use crate::auth::bearer_token;
use crate::errors::ApiError;
use crate::tenants::Tenant;

/// Refuses a `Transfer-Encoding` other than `chunked` alone (RFC 9112
/// §6.1: 501 for codings the server does not understand). Pingora would
/// forward a body framed `gzip, chunked` as `chunked` only, changing what
/// the backend sees.
pub(super) fn check_framing(req: &RequestHeader) -> Result<(), ApiError> {
    let mut codings = req.headers.get_all(header::TRANSFER_ENCODING).iter();
    let Some(first) = codings.next() else {
        return Ok(());
    };
    let chunked = first
        .as_bytes()
        .trim_ascii()
        .eq_ignore_ascii_case(b"chunked");
    if chunked && codings.next().is_none() {
        return Ok(());
    }
    let shown = String::from_utf8_lossy(first.as_bytes()).into_owned();
    Err(ApiError::unsupported_transfer_coding(&shown))
}

/// The API key a request presents: `Authorization: Bearer <key>`, else
/// `x-api-key: <key>`.
fn presented_key(req: &RequestHeader) -> Option<&[u8]> {
    match req.headers.get(header::AUTHORIZATION) {
        Some(v) => bearer_token(v.as_bytes()),
        None => req
            .headers
            .get(parsed::API_KEY)
            .map(|v| v.as_bytes().trim_ascii())
            .filter(|k| !k.is_empty()),
    }
}

impl Gateway {
    /// Checks the API key, when keys are required (an admin key will do),
    /// and names the caller's tenant. The key comes from `Authorization:
    /// Bearer`, else from `x-api-key` (Anthropic clients).
    pub(super) fn authenticate(
        &self,
        req: &RequestHeader,
    ) -> Result<Option<Arc<Tenant>>, ApiError> {
        let Some(tenants) = &self.tenants else {
            return Ok(None);
        };
        if let Some(tenant) = presented_key(req).and_then(|k| tenants.identify(k)) {
            return Ok(Some(tenant));
        }
        if self.is_admin(req) {
            return Ok(None);
        }
        Err(ApiError::unauthorized())
    }

    /// Whether the request carries an admin key.
    pub(super) fn is_admin(&self, req: &RequestHeader) -> bool {
        self.admin_keys
            .as_ref()
            .is_some_and(|keys| presented_key(req).is_some_and(|k| keys.check_key(k)))
    }

    /// Takes a token from the global bucket, when there is one.
    pub(super) fn check_global_limit(&self) -> Result<(), ApiError> {
        let Some(limiter) = &self.global_limiter else {
            return Ok(());
        };
        limiter.check().map_err(|wait| {
            self.metrics
                .rate_limited
                .with_label_values(&["", "global"])
                .inc();
            ApiError::rate_limited(wait)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_te(values: &[&str]) -> RequestHeader {
        let mut req = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        for v in values {
            req.append_header(header::TRANSFER_ENCODING, *v).unwrap();
        }
        req
    }

    #[test]
    fn only_chunked_alone_is_forwarded() {
        assert!(check_framing(&with_te(&[])).is_ok());
        assert!(check_framing(&with_te(&["chunked"])).is_ok());
        assert!(check_framing(&with_te(&[" Chunked "])).is_ok());
        for refused in [
            &["gzip, chunked"][..],
            &["gzip"],
            &["chunked", "chunked"],
            &["identity"],
        ] {
            let e = check_framing(&with_te(refused)).unwrap_err();
            assert_eq!(e.status, 501, "{refused:?}");
        }
    }
}
