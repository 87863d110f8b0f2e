//! OpenAI-shaped error responses.
//!
//! Every error the gateway answers itself uses the envelope clients of the
//! OpenAI API already parse: `{"error":{"message","type","param","code"}}`;
//! on Anthropic's Messages API (`/v1/messages…`) the same error is written
//! in Anthropic's envelope instead, which its SDKs parse:
//! `{"type":"error","error":{"type","message"},"request_id"}`.

use serde::Serialize;

/// An error the gateway answers to the client itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// OpenAI error `type` (e.g. `invalid_request_error`).
    pub kind: &'static str,
    /// Machine-readable `code` (e.g. `model_not_found`).
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// The request field the error is about, when there is one.
    pub param: Option<&'static str>,
    /// Value of a `Retry-After` header to send, in seconds.
    pub retry_after: Option<u64>,
    /// What few answers carry besides the envelope (boxed: errors travel
    /// in `Result`s on the request path and stay small).
    pub extra: Option<Box<ErrorExtra>>,
}

/// Headers and blocks of an error answer beyond the envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorExtra {
    /// Further headers of the answer (e.g. `x-ratelimit-*`).
    pub headers: Vec<(&'static str, String)>,
    /// The `admission` block beside `error` (context-window refusals).
    pub admission: Option<serde_json::Value>,
    /// A `param` built at run time (e.g. `messages[2].role`), in place of
    /// [`ApiError::param`].
    pub param: Option<String>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    admission: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<&'a str>,
    code: &'a str,
}

impl ApiError {
    fn new(
        status: u16,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            kind,
            code,
            message: message.into(),
            param: None,
            retry_after: None,
            extra: None,
        }
    }

    /// The extras, created when first needed.
    pub fn extra_mut(&mut self) -> &mut ErrorExtra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// Further headers of the answer.
    pub fn headers(&self) -> &[(&'static str, String)] {
        self.extra.as_ref().map_or(&[], |x| &x.headers)
    }

    /// 400 for a request the gateway cannot parse or route.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(
            400,
            "invalid_request_error",
            "invalid_request_error",
            message,
        )
    }

    /// 400 when no model could be found in the request.
    pub fn missing_model() -> Self {
        let mut e = Self::new(
            400,
            "invalid_request_error",
            "missing_required_field",
            "X-Model-ID header, /model/<name> path, or 'model' field in request body required",
        );
        e.param = Some("model");
        e
    }

    /// 400 for a field whose value is unacceptable.
    pub fn invalid_field(field: &'static str, reason: impl std::fmt::Display) -> Self {
        let mut e = Self::new(
            400,
            "invalid_request_error",
            "invalid_field_value",
            format!("Invalid value for field '{field}': {reason}"),
        );
        e.param = Some(field);
        e
    }

    /// 400 for a request that failed validation (`PROXY_VALIDATE_REQUESTS`):
    /// `param` is the field of the first problem, omitted when empty.
    pub fn validation(message: impl Into<String>, param: &str) -> Self {
        let mut e = Self::new(400, "invalid_request_error", "validation_error", message);
        if !param.is_empty() {
            e.extra_mut().param = Some(param.to_owned());
        }
        e
    }

    /// 401 for a missing or wrong bearer token.
    pub fn unauthorized() -> Self {
        Self::new(
            401,
            "invalid_request_error",
            "invalid_api_key",
            "Invalid or missing API key. Send it as 'Authorization: Bearer <key>'.",
        )
    }

    /// 404 for a model the registry does not know.
    pub fn model_not_found(model: &str) -> Self {
        let mut e = Self::new(
            404,
            "not_found_error",
            "model_not_found",
            format!("Model '{model}' not found"),
        );
        e.param = Some("model");
        e
    }

    /// 404 for a request no route of its Gateway matches.
    pub fn route_not_found(host: &str, path: &str, gateway: &str) -> Self {
        Self::new(
            404,
            "not_found_error",
            "route_not_found",
            format!("no route of Gateway {gateway} matches host '{host}' and path '{path}'"),
        )
    }

    /// An endpoint picker's own answer to the client (429 to shed load,
    /// 503 without a ready endpoint, ...), with what it said.
    pub fn picker_refused(status: u16, message: String) -> Self {
        let (kind, code) = match status {
            429 => ("rate_limit_error", "rate_limit_exceeded"),
            503 => ("service_unavailable_error", "service_unavailable"),
            400..=499 => ("invalid_request_error", "endpoint_picker_refused"),
            _ => ("server_error", "endpoint_picker_refused"),
        };
        let message = if message.trim().is_empty() {
            format!("the endpoint picker answered {status}")
        } else {
            message
        };
        Self::new(status, kind, code, message)
    }

    /// 404 for a path the model does not serve through the gateway.
    pub fn path_not_served(model: &str, path: &str) -> Self {
        Self::new(
            404,
            "not_found_error",
            "path_not_served",
            format!("Path '{path}' is not served for model '{model}'"),
        )
    }

    /// 403 for a route that needs an admin key.
    pub fn admin_key_required(path: &str) -> Self {
        Self::new(
            403,
            "permission_error",
            "admin_key_required",
            format!("Path '{path}' needs an admin key"),
        )
    }

    /// 400 for a request path that could resolve elsewhere than it reads.
    pub fn invalid_path(path: &str, reason: &str) -> Self {
        Self::new(
            400,
            "invalid_request_error",
            "invalid_path",
            format!("Invalid path '{path}': {reason}"),
        )
    }

    /// 405 for a method the route does not accept.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "invalid_request_error",
            "method_not_allowed",
            format!("Method {method} not allowed"),
        )
    }

    /// 413 for a request body over the configured bound.
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "invalid_request_error",
            "request_too_large",
            format!("Request body exceeds the limit of {limit} bytes"),
        )
    }

    /// 415 for an API request whose body is neither JSON nor a form: the
    /// gateway checks what an engine reads, and this it cannot read.
    pub fn unsupported_media_type(content_type: &str, path: &str) -> Self {
        let shown: String = content_type.chars().take(128).collect();
        Self::new(
            415,
            "invalid_request_error",
            "unsupported_media_type",
            format!(
                "Unsupported Content-Type '{shown}' for {path}: send a JSON body \
                 (application/json, or no Content-Type) or, where the API takes a form, \
                 multipart/form-data"
            ),
        )
    }

    /// 400 for a multipart form whose `model` field names another model
    /// than the request head does.
    pub fn form_model_mismatch(form: &str, requested: &str) -> Self {
        Self::invalid_field(
            "model",
            format!("the form's model '{form}' is not the model the request names ('{requested}')"),
        )
    }

    /// 408 for a request header not complete within the header deadline.
    pub fn header_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            408,
            "invalid_request_error",
            "request_timeout",
            format!(
                "Request header not received within {}",
                humantime::format_duration(limit)
            ),
        )
    }

    /// 431 for a request header over the configured bound.
    pub fn header_too_large(limit: usize) -> Self {
        Self::new(
            431,
            "invalid_request_error",
            "request_header_too_large",
            format!("Request header exceeds the limit of {limit} bytes"),
        )
    }

    /// 501 for a transfer coding the gateway does not forward.
    pub fn unsupported_transfer_coding(value: &str) -> Self {
        Self::new(
            501,
            "invalid_request_error",
            "unsupported_transfer_encoding",
            format!("Transfer-Encoding '{value}' is not supported; send 'chunked' alone"),
        )
    }

    /// 503 for a connection over the open-connection limits.
    pub fn too_many_connections(scope: &str) -> Self {
        Self::new(
            503,
            "service_unavailable_error",
            "too_many_connections",
            format!("Too many open connections ({scope}), please retry"),
        )
    }

    /// 429 when a rate limit is exhausted.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        let mut e = Self::new(
            429,
            "rate_limit_error",
            "rate_limit_exceeded",
            "Rate limit exceeded, please retry later",
        );
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }

    /// 502 when no upstream could be reached.
    pub fn bad_gateway() -> Self {
        Self::new(502, "upstream_error", "bad_gateway", "upstream unavailable")
    }

    /// 503 when the model has no ready endpoint.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            503,
            "service_unavailable_error",
            "service_unavailable",
            message,
        )
    }

    /// 499 (nginx's code) for a client that went away while its request
    /// waited; nobody reads it, the log does.
    pub fn client_gone() -> Self {
        Self::new(
            499,
            "invalid_request_error",
            "client_closed_request",
            "the client closed the connection",
        )
    }

    /// 503 when the activation queue of a model is full.
    pub fn queue_full() -> Self {
        Self::new(
            503,
            "service_unavailable_error",
            "queue_full",
            "Service overloaded, please retry",
        )
    }

    /// 413 when a request's estimated prompt and output limit exceed the
    /// model's context budget; `admission` says by how much.
    pub fn context_window_exceeded(message: String, admission: serde_json::Value) -> Self {
        let mut e = Self::new(
            413,
            "invalid_request_error",
            "context_window_exceeded",
            message,
        );
        e.extra_mut().admission = Some(admission);
        e
    }

    /// 503 when a ready model had no free slot within the queue timeout.
    pub fn queue_timeout(model: &str, waited: std::time::Duration) -> Self {
        let mut e = Self::new(
            503,
            "service_unavailable_error",
            "queue_timeout",
            format!(
                "Model '{model}' is at capacity: no slot freed up within {}, please retry",
                humantime::format_duration(waited)
            ),
        );
        e.retry_after = Some(1);
        e
    }

    /// 503 when a model could not be started.
    pub fn activation_failed(model: &str, reason: &str) -> Self {
        Self::new(
            503,
            "service_unavailable_error",
            "activation_failed",
            format!("Failed to activate model '{model}': {reason}"),
        )
    }

    /// 503 when a model did not become ready within the wait bound.
    pub fn activation_timeout(waited: std::time::Duration) -> Self {
        Self::new(
            503,
            "service_unavailable_error",
            "activation_timeout",
            format!(
                "Timeout waiting for model to become ready (waited {})",
                humantime::format_duration(waited)
            ),
        )
    }

    /// 504 when the upstream did not answer in time.
    pub fn gateway_timeout() -> Self {
        Self::new(504, "timeout_error", "timeout", "upstream timed out")
    }

    /// 500 for failures inside the gateway.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", "server_error", message)
    }

    /// The whole HTTP/1.1 answer for a connection the gateway closes after
    /// it, written below the request path (header limits, connection caps).
    pub fn closing_response(&self, reason: &str) -> Vec<u8> {
        let body = self.body();
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// The JSON body of this error, with a trailing newline.
    pub fn body(&self) -> Vec<u8> {
        let envelope = Envelope {
            error: Body {
                message: &self.message,
                kind: self.kind,
                param: self
                    .extra
                    .as_ref()
                    .and_then(|x| x.param.as_deref())
                    .or(self.param),
                code: self.code,
            },
            admission: self.extra.as_ref().and_then(|x| x.admission.as_ref()),
        };
        let mut out = serde_json::to_vec(&envelope).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

#[derive(Serialize)]
struct AnthropicEnvelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicBody<'a>,
    request_id: Option<&'a str>,
}

#[derive(Serialize)]
struct AnthropicBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

impl ApiError {
    /// The error type Anthropic's API gives an answer of this status.
    fn anthropic_kind(&self) -> &'static str {
        match self.status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            408 | 504 => "timeout_error",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body of this error in Anthropic's envelope, with a
    /// trailing newline.
    pub fn anthropic_body(&self, request_id: Option<&str>) -> Vec<u8> {
        let envelope = AnthropicEnvelope {
            kind: "error",
            error: AnthropicBody {
                kind: self.anthropic_kind(),
                message: &self.message,
            },
            request_id,
        };
        let mut out = serde_json::to_vec(&envelope).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// The body for a request to `path`: Anthropic's envelope on its
    /// Messages API, OpenAI's elsewhere.
    pub fn body_for(&self, path: &str, request_id: Option<&str>) -> Vec<u8> {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            self.anthropic_body(request_id)
        } else {
            self.body()
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_has_openai_shape() {
        let v: serde_json::Value =
            serde_json::from_slice(&ApiError::model_not_found("llama").body()).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["message"], "Model 'llama' not found");
    }

    #[test]
    fn messages_api_errors_have_anthropics_shape() {
        let err = ApiError::missing_model();
        let v: serde_json::Value =
            serde_json::from_slice(&err.body_for("/v1/messages", Some("req-1"))).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["message"], err.message);
        assert_eq!(v["request_id"], "req-1");
        let cases = [
            (ApiError::unauthorized(), "authentication_error"),
            (ApiError::model_not_found("m"), "not_found_error"),
            (ApiError::rate_limited(1), "rate_limit_error"),
            (ApiError::queue_full(), "overloaded_error"),
            (ApiError::bad_gateway(), "api_error"),
            (ApiError::gateway_timeout(), "timeout_error"),
        ];
        for (err, kind) in cases {
            let v: serde_json::Value =
                serde_json::from_slice(&err.body_for("/v1/messages/count_tokens", None)).unwrap();
            assert_eq!(v["error"]["type"], kind, "{err}");
            assert!(v["request_id"].is_null());
        }
        let openai: serde_json::Value =
            serde_json::from_slice(&err.body_for("/v1/chat/completions", None)).unwrap();
        assert_eq!(openai["error"]["code"], "missing_required_field");
    }

    #[test]
    fn param_is_omitted_when_absent() {
        let v: serde_json::Value = serde_json::from_slice(&ApiError::bad_gateway().body()).unwrap();
        assert!(v["error"].get("param").is_none());
        assert_eq!(ApiError::rate_limited(0).retry_after, Some(1));
    }
}
