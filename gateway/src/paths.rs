//! Which backend paths a client may reach through the gateway.
//!
//! A model server has more routes than its inference API: vLLM loads LoRA
//! adapters at `/v1/load_lora_adapter`, simulators and engines expose debug
//! and admin routes. By default the gateway forwards only the inference API
//! ([`INFERENCE_PATHS`]); a model lists other path prefixes it serves in
//! `servePaths` (model file) or the `flexinfer.ai/serve-paths` annotation,
//! which then replace the default. Adapter loading ([`ADMIN_PATHS`]) needs
//! an admin key on top. Dot segments and encoded slashes are refused on
//! every path, so a prefix check cannot be walked around.

use crate::errors::ApiError;

/// Path prefixes forwarded when a model lists none: the OpenAI API (chat,
/// completions, embeddings, audio, images, responses, models, rerank) and
/// Anthropic's messages.
pub const INFERENCE_PATHS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/audio",
    "/v1/images",
    "/v1/responses",
    "/v1/models",
    "/v1/messages",
    "/v1/rerank",
];

/// The engines' own inference routes (llama.cpp, Ollama, SGLang, vLLM),
/// reachable where a model's `servePaths` opens them.
const ENGINE_API_PATHS: &[&str] = &[
    "/v1/score",
    "/chat/completions",
    "/completions",
    "/completion",
    "/embeddings",
    "/embedding",
    "/infill",
    "/rerank",
    "/reranking",
    "/score",
    "/generate",
    "/tokenize",
    "/detokenize",
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
];

/// Whether `path` (as an engine's router matches it) is a route whose POST
/// body an engine reads as an API request: the APIs of [`INFERENCE_PATHS`]
/// (but the model listing) and [`ENGINE_API_PATHS`], or below one. A body
/// there that the gateway cannot read as JSON or a form is refused.
pub fn is_api_body_path(path: &str) -> bool {
    INFERENCE_PATHS
        .iter()
        .filter(|p| **p != "/v1/models")
        .chain(ENGINE_API_PATHS)
        .any(|p| {
            path.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// Paths that change what a model server serves (LoRA adapters): forwarded
/// only when the model serves them and the request carries an admin key.
pub const ADMIN_PATHS: &[&str] = &["/v1/load_lora_adapter", "/v1/unload_lora_adapter"];

/// The paths one model serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PathPolicy {
    /// [`INFERENCE_PATHS`].
    #[default]
    Inference,
    /// These prefixes, in place of the default.
    Listed(Vec<String>),
    /// Any path (global mode: member gateways apply their own policy).
    Any,
}

impl PathPolicy {
    /// The policy of a model that lists `prefixes` (none: the default).
    /// Each must be an absolute path without dot segments.
    pub fn listed<I, S>(prefixes: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Vec::new();
        for prefix in prefixes {
            let prefix = prefix.as_ref().trim().trim_end_matches('/');
            if prefix.is_empty() {
                // `/` (or an empty entry from a trailing comma).
                if !out.iter().any(|p: &String| p.is_empty()) {
                    out.push(String::new());
                }
                continue;
            }
            if !prefix.starts_with('/') || check_segments(prefix).is_err() {
                return Err(format!(
                    "serve path '{prefix}' must be an absolute path without '.', '..' or encoded slashes"
                ));
            }
            out.push(prefix.to_string());
        }
        Ok(if out.is_empty() {
            PathPolicy::Inference
        } else {
            PathPolicy::Listed(out)
        })
    }

    /// The policy of a comma-separated annotation value.
    pub fn from_annotation(value: Option<&str>) -> Result<Self, String> {
        match value {
            None => Ok(PathPolicy::Inference),
            Some(v) => Self::listed(v.split(',').filter(|p| !p.trim().is_empty())),
        }
    }

    /// Whether `path` (no query string) may be forwarded for a model;
    /// `admin` says the request carries an admin key.
    pub fn check(&self, model: &str, path: &str, admin: bool) -> Result<(), ApiError> {
        check_segments(path)?;
        let served = match self {
            PathPolicy::Any => return Ok(()),
            PathPolicy::Inference => INFERENCE_PATHS.iter().any(|p| under(path, p)),
            PathPolicy::Listed(prefixes) => prefixes.iter().any(|p| under(path, p)),
        };
        if !served {
            return Err(ApiError::path_not_served(model, path));
        }
        if !admin && ADMIN_PATHS.iter().any(|p| under(path, p)) {
            return Err(ApiError::admin_key_required(path));
        }
        Ok(())
    }
}

/// Whether `path` is `prefix` or below it (at a segment boundary).
fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/') || prefix.is_empty(),
        None => false,
    }
}

/// Refuses dot segments (`.`, `..`, also percent-encoded) and encoded
/// slashes or backslashes, which a backend may resolve into another path
/// than the one checked.
pub fn check_segments(path: &str) -> Result<(), ApiError> {
    // Most paths have nothing to look at: no dot, percent or backslash.
    if !path.bytes().any(|b| matches!(b, b'.' | b'%' | b'\\')) {
        return Ok(());
    }
    for segment in path.split('/') {
        if is_dot_segment(segment) {
            return Err(ApiError::invalid_path(
                path,
                "dot segments are not forwarded",
            ));
        }
        if segment.contains('\\')
            || contains_escape(segment, b"2f")
            || contains_escape(segment, b"5c")
        {
            return Err(ApiError::invalid_path(
                path,
                "encoded slashes and backslashes are not forwarded",
            ));
        }
    }
    Ok(())
}

/// Whether `segment` is `.` or `..`, each dot possibly written `%2e`/`%2E`.
fn is_dot_segment(segment: &str) -> bool {
    let mut rest = segment.as_bytes();
    let mut dots = 0;
    while !rest.is_empty() {
        if rest[0] == b'.' {
            rest = &rest[1..];
        } else if rest.len() >= 3 && rest[0] == b'%' && rest[1..3].eq_ignore_ascii_case(b"2e") {
            rest = &rest[3..];
        } else {
            return false;
        }
        dots += 1;
    }
    matches!(dots, 1 | 2)
}

/// Whether `segment` holds the escape `%` + `hex` (any case).
fn contains_escape(segment: &str, hex: &[u8; 2]) -> bool {
    segment
        .as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1..].eq_ignore_ascii_case(hex))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_body_paths_are_the_apis_and_the_engines_routes() {
        for api in [
            "/v1/chat/completions",
            "/v1/audio/transcriptions",
            "/v1/messages",
            "/completion",
            "/api/generate",
        ] {
            assert!(is_api_body_path(api), "{api}");
        }
        for other in ["/v1/models", "/v1/chat/completionsx", "/upload/image", "/"] {
            assert!(!is_api_body_path(other), "{other}");
        }
    }

    #[test]
    fn the_inference_api_is_served_by_default_and_nothing_else() {
        let p = PathPolicy::default();
        for ok in [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/embeddings",
            "/v1/audio/transcriptions",
            "/v1/images/generations",
            "/v1/responses/resp_1/cancel",
            "/v1/models/m",
            "/v1/messages/count_tokens",
        ] {
            assert!(p.check("m", ok, false).is_ok(), "{ok}");
        }
        // Dots and escapes that make no dot segment are paths like others.
        for ok in [
            "/v1/models/llama-3.1-8b",
            "/v1/models/a...b",
            "/v1/models/%41",
        ] {
            assert!(p.check("m", ok, false).is_ok(), "{ok}");
        }
        for refused in [
            "/v1/load_lora_adapter",
            "/sim/requests",
            "/metrics",
            "/",
            "/v1/chat/completionsX",
            "/v1",
        ] {
            let e = p.check("m", refused, true).unwrap_err();
            assert_eq!(e.status, 404, "{refused}");
        }
    }

    #[test]
    fn dot_segments_and_encoded_slashes_are_refused_everywhere() {
        for path in [
            "/v1/chat/completions/../../sim/requests",
            "/v1/chat/%2e%2E/x",
            "/v1/./chat/completions",
            "/v1/chat%2fcompletions",
            "/v1/chat/completions%5C..",
            "/v1/chat/%2E",
            "/v1/.%2e/x",
            "/v1/chat/a\\b",
        ] {
            for policy in [PathPolicy::default(), PathPolicy::Any] {
                let e = policy.check("m", path, true).unwrap_err();
                assert_eq!(e.status, 400, "{path}");
            }
        }
    }

    #[test]
    fn listed_prefixes_replace_the_default_and_admin_paths_need_a_key() {
        let p = PathPolicy::listed([
            "/v1/chat/completions",
            "/tokenize/",
            "/v1/load_lora_adapter",
        ])
        .unwrap();
        assert!(p.check("m", "/v1/chat/completions", false).is_ok());
        assert!(p.check("m", "/tokenize", false).is_ok());
        assert!(p.check("m", "/tokenize/x", false).is_ok());
        assert_eq!(
            p.check("m", "/v1/embeddings", false).unwrap_err().status,
            404
        );
        assert_eq!(
            p.check("m", "/v1/load_lora_adapter", false)
                .unwrap_err()
                .status,
            403
        );
        assert!(p.check("m", "/v1/load_lora_adapter", true).is_ok());
        let everything = PathPolicy::listed(["/"]).unwrap();
        assert!(everything.check("m", "/anything/at/all", false).is_ok());
        assert!(PathPolicy::listed(["relative"]).is_err());
        assert!(PathPolicy::listed(["/a/../b"]).is_err());
        assert_eq!(
            PathPolicy::listed(Vec::<String>::new()).unwrap(),
            PathPolicy::Inference
        );
        assert_eq!(
            PathPolicy::from_annotation(Some("/api, /v1/chat/completions,")).unwrap(),
            PathPolicy::Listed(vec!["/api".into(), "/v1/chat/completions".into()])
        );
    }
}
