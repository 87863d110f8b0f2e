//! Optional validation of OpenAI requests (`--validate-requests`,
//! `PROXY_VALIDATE_REQUESTS`): chat, completion and embedding requests
//! that an engine would refuse (no messages, a role that does not exist,
//! a field of the wrong type, a sampling value out of range) are answered
//! with 400 `validation_error` before they reach an engine or wait for a
//! cold start.
//!
//! The checks and messages are the original gateway's. Every problem is
//! collected; the answer names the first (its field in `param`) and how
//! many more there were. One difference: the `developer` role (OpenAI's
//! successor of `system`, which the SDKs send for reasoning models) is
//! accepted.

use serde_json::{Map, Value};

use crate::errors::ApiError;

/// Which request a path carries, when it is validated at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `…/v1/chat/completions`
    Chat,
    /// `…/v1/completions`
    Completions,
    /// `…/v1/embeddings`
    Embeddings,
}

impl Endpoint {
    /// The endpoint of a request path (also behind a `/model/<name>`
    /// prefix); `None` for paths that are not validated.
    pub fn of(path: &str) -> Option<Self> {
        if path.ends_with("/v1/chat/completions") {
            Some(Self::Chat)
        } else if path.ends_with("/v1/completions") {
            Some(Self::Completions)
        } else if path.ends_with("/v1/embeddings") {
            Some(Self::Embeddings)
        } else {
            None
        }
    }
}

/// Roles a chat message may have.
const ROLES: [&str; 6] = [
    "system",
    "user",
    "assistant",
    "tool",
    "function",
    "developer",
];

/// One problem: the field and what is wrong with it.
struct Problem {
    field: String,
    message: String,
}

/// Collects problems of one request.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            field: field.into(),
            message: message.into(),
        });
    }

    /// A field present with a value of another type than `expected`.
    fn wrong_type(&mut self, field: &str, expected: &str) {
        self.add(field, format!("{field} must be {expected}"));
    }

    /// A number field: absent and `null` pass; otherwise a number (an
    /// integer when `integer`) within `check`, else `message`.
    fn number(
        &mut self,
        body: &Map<String, Value>,
        field: &str,
        integer: bool,
        check: impl Fn(f64) -> bool,
        message: &str,
    ) {
        let value = match body.get(field) {
            None | Some(Value::Null) => return,
            Some(Value::Number(n)) if !integer || n.is_i64() || n.is_u64() => n.as_f64(),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => n.as_f64(),
            Some(_) if integer => return self.wrong_type(field, "an integer"),
            Some(_) => return self.wrong_type(field, "a number"),
        };
        if !value.is_some_and(check) {
            self.add(field, message);
        }
    }

    /// The answer for the problems found, if any.
    fn into_error(self) -> Result<(), ApiError> {
        let mut problems = self.0.into_iter();
        let Some(first) = problems.next() else {
            return Ok(());
        };
        let more = problems.count();
        let message = match more {
            0 => first.message,
            1 => format!("{} (and 1 more error)", first.message),
            n => format!("{} (and {n} more errors)", first.message),
        };
        Err(ApiError::validation(message, &first.field))
    }
}

/// Checks the body of a request to `endpoint`. The body's `model` is
/// required unless the request named its model in the head
/// (`model_in_head`: `X-Model-ID` or a `/model/<name>/` path).
pub fn validate(endpoint: Endpoint, body: &[u8], model_in_head: bool) -> Result<(), ApiError> {
    let mut problems = Problems::default();
    if body.iter().all(u8::is_ascii_whitespace) {
        problems.add("", "Request body is empty");
        return problems.into_error();
    }
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            problems.add("", format!("Invalid JSON: {e}"));
            return problems.into_error();
        }
    };
    let Value::Object(body) = parsed else {
        problems.add("", "Invalid JSON: the request body must be a JSON object");
        return problems.into_error();
    };
    match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        None | Some(Value::Null) if model_in_head => {}
        None | Some(Value::Null) | Some(Value::String(_)) => {
            problems.add("model", "model is required")
        }
        Some(_) => problems.wrong_type("model", "a string"),
    }
    match endpoint {
        Endpoint::Chat => {
            messages(&body, &mut problems);
            sampling(&body, &mut problems);
        }
        Endpoint::Completions => {
            sampling(&body, &mut problems);
            problems.number(
                &body,
                "best_of",
                true,
                |v| v >= 1.0,
                "best_of must be at least 1",
            );
            problems.number(
                &body,
                "logprobs",
                true,
                |v| v >= 0.0,
                "logprobs must be non-negative",
            );
        }
        Endpoint::Embeddings => embeddings(&body, &mut problems),
    }
    problems.into_error()
}

/// A chat request's `messages`: a non-empty array of objects with a known
/// string `role`.
fn messages(body: &Map<String, Value>, problems: &mut Problems) {
    let list = match body.get("messages") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        None | Some(Value::Null) | Some(Value::Array(_)) => {
            return problems.add("messages", "messages is required and must not be empty")
        }
        Some(_) => return problems.wrong_type("messages", "an array"),
    };
    for (i, message) in list.iter().enumerate() {
        let Value::Object(message) = message else {
            problems.wrong_type(&format!("messages[{i}]"), "an object");
            continue;
        };
        let field = || format!("messages[{i}].role");
        match message.get("role") {
            Some(Value::String(role)) if ROLES.contains(&role.as_str()) => {}
            None | Some(Value::Null) => problems.add(field(), "role is required"),
            Some(Value::String(role)) if role.is_empty() => {
                problems.add(field(), "role is required")
            }
            Some(Value::String(role)) => problems.add(
                field(),
                format!("role must be one of: {} (got '{role}')", ROLES.join(", ")),
            ),
            Some(_) => problems.wrong_type(&field(), "a string"),
        }
    }
}

/// Sampling settings shared by chat and completions.
fn sampling(body: &Map<String, Value>, problems: &mut Problems) {
    let penalty = |v: f64| (-2.0..=2.0).contains(&v);
    problems.number(
        body,
        "temperature",
        false,
        |v| (0.0..=2.0).contains(&v),
        "temperature must be between 0 and 2",
    );
    problems.number(
        body,
        "top_p",
        false,
        |v| (0.0..=1.0).contains(&v),
        "top_p must be between 0 and 1",
    );
    problems.number(body, "n", true, |v| v >= 1.0, "n must be at least 1");
    problems.number(
        body,
        "max_tokens",
        true,
        |v| v >= 1.0,
        "max_tokens must be at least 1",
    );
    problems.number(
        body,
        "presence_penalty",
        false,
        penalty,
        "presence_penalty must be between -2 and 2",
    );
    problems.number(
        body,
        "frequency_penalty",
        false,
        penalty,
        "frequency_penalty must be between -2 and 2",
    );
}

/// An embeddings request: `input` present, a known `encoding_format`, a
/// positive `dimensions`.
fn embeddings(body: &Map<String, Value>, problems: &mut Problems) {
    if matches!(body.get("input"), None | Some(Value::Null)) {
        problems.add("input", "input is required");
    }
    match body.get("encoding_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == "float" || f == "base64" => {}
        Some(_) => problems.add(
            "encoding_format",
            "encoding_format must be 'float' or 'base64'",
        ),
    }
    problems.number(
        body,
        "dimensions",
        true,
        |v| v >= 1.0,
        "dimensions must be at least 1",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(endpoint: Endpoint, body: &str) -> (String, Option<String>) {
        let e = validate(endpoint, body.as_bytes(), false).expect_err(body);
        assert_eq!((e.status, e.code), (400, "validation_error"), "{body}");
        let envelope: Value = serde_json::from_slice(&e.body()).unwrap();
        let param = envelope["error"]["param"].as_str().map(str::to_owned);
        (e.message, param)
    }

    #[test]
    fn good_requests_pass() {
        let chat = r#"{"model":"m","messages":[{"role":"developer","content":"x"},{"role":"user","content":"hi"}],"temperature":0.7,"max_tokens":16,"n":1,"top_p":null}"#;
        assert!(validate(Endpoint::Chat, chat.as_bytes(), false).is_ok());
        let headed = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
        assert!(validate(Endpoint::Chat, headed.as_bytes(), true).is_ok());
        let completion = r#"{"model":"m","prompt":"x","best_of":2,"logprobs":0,"max_tokens":4.0}"#;
        assert!(validate(Endpoint::Completions, completion.as_bytes(), false).is_ok());
        let embedding = r#"{"model":"m","input":["a"],"encoding_format":"base64","dimensions":8}"#;
        assert!(validate(Endpoint::Embeddings, embedding.as_bytes(), false).is_ok());
    }

    #[test]
    fn malformed_chat_requests_are_named() {
        let cases = [
            ("", "Request body is empty", None),
            ("{", "Invalid JSON: EOF while parsing an object at line 1 column 1", None),
            ("[]", "Invalid JSON: the request body must be a JSON object", None),
            (r#"{"model":"m"}"#, "messages is required and must not be empty", Some("messages")),
            (r#"{"model":"m","messages":[]}"#, "messages is required and must not be empty", Some("messages")),
            (r#"{"model":"m","messages":"hi"}"#, "messages must be an array", Some("messages")),
            (r#"{"model":"m","messages":[7]}"#, "messages[0] must be an object", Some("messages[0]")),
            (r#"{"model":"m","messages":[{"content":"x"}]}"#, "role is required", Some("messages[0].role")),
            (r#"{"model":"m","messages":[{"role":1}]}"#, "messages[0].role must be a string", Some("messages[0].role")),
            (
                r#"{"model":"m","messages":[{"role":"user"},{"role":"robot"}]}"#,
                "role must be one of: system, user, assistant, tool, function, developer (got 'robot')",
                Some("messages[1].role"),
            ),
            (r#"{"model":7,"messages":[{"role":"user"}]}"#, "model must be a string", Some("model")),
            (r#"{"messages":[{"role":"user"}],"temperature":"hot"}"#, "model is required (and 1 more error)", Some("model")),
            (r#"{"model":"m","messages":[{"role":"user"}],"max_tokens":1.5}"#, "max_tokens must be an integer", Some("max_tokens")),
            (
                r#"{"model":"m","messages":[{"role":"user"}],"temperature":3,"top_p":2,"n":0}"#,
                "temperature must be between 0 and 2 (and 2 more errors)",
                Some("temperature"),
            ),
        ];
        for (body, message, param) in cases {
            assert_eq!(
                problem(Endpoint::Chat, body),
                (message.to_owned(), param.map(str::to_owned)),
                "{body}"
            );
        }
    }

    #[test]
    fn completions_and_embeddings_checks() {
        assert_eq!(
            problem(Endpoint::Completions, r#"{"model":"m","best_of":0}"#).0,
            "best_of must be at least 1"
        );
        assert_eq!(
            problem(Endpoint::Completions, r#"{"model":"m","logprobs":-1}"#).0,
            "logprobs must be non-negative"
        );
        assert_eq!(
            problem(Endpoint::Embeddings, r#"{"model":"m"}"#),
            ("input is required".to_owned(), Some("input".to_owned()))
        );
        assert_eq!(
            problem(
                Endpoint::Embeddings,
                r#"{"model":"m","input":"x","encoding_format":"int8"}"#
            )
            .0,
            "encoding_format must be 'float' or 'base64'"
        );
        assert_eq!(
            problem(
                Endpoint::Embeddings,
                r#"{"model":"m","input":"x","dimensions":0}"#
            )
            .0,
            "dimensions must be at least 1"
        );
    }

    #[test]
    fn only_the_three_endpoints_are_validated() {
        assert_eq!(Endpoint::of("/v1/chat/completions"), Some(Endpoint::Chat));
        assert_eq!(
            Endpoint::of("/model/x/v1/completions"),
            Some(Endpoint::Completions)
        );
        assert_eq!(Endpoint::of("/v1/embeddings"), Some(Endpoint::Embeddings));
        assert_eq!(Endpoint::of("/v1/chat/completions/x"), None);
        assert_eq!(Endpoint::of("/v1/responses"), None);
    }
}
