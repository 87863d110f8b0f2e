//! Failures as the Kubernetes `Status` object.
//!
//! Clients (kube's `Error::Api`, `kubectl`) decide what to do from `code`
//! and `reason`, so every failure the server returns carries the same shape
//! and reasons as a real API server's.

use serde_json::{json, Value};

use crate::registry::ResourceType;

/// A failed request: HTTP code, `Status.reason`, message and optional
/// `Status.details`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `Conflict`, `Expired`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `Status.details`, when the failure concerns one object.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// An error with the reason Kubernetes uses for `code`.
    pub fn with_code(code: u16, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason_for(code).to_string(),
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, rt: &ResourceType, name: &str) -> Self {
        self.details = Some(json!({
            "name": name,
            "group": rt.group,
            "kind": rt.plural,
        }));
        self
    }

    pub(crate) fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError::with_code(
            404,
            format!("{} \"{}\" not found", rt.qualified_name(), name),
        )
        .with_details(rt, name)
    }

    pub(crate) fn namespace_not_found(namespace: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound".into(),
            message: format!("namespaces \"{namespace}\" not found"),
            details: Some(json!({"name": namespace, "kind": "namespaces"})),
        }
    }

    pub(crate) fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists".into(),
            message: format!("{} \"{}\" already exists", rt.qualified_name(), name),
            details: None,
        }
        .with_details(rt, name)
    }

    pub(crate) fn conflict(rt: &ResourceType, name: &str) -> Self {
        ApiError::with_code(
            409,
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                rt.qualified_name(),
                name
            ),
        )
        .with_details(rt, name)
    }

    pub(crate) fn precondition_failed(rt: &ResourceType, name: &str, what: &str) -> Self {
        ApiError::with_code(
            409,
            format!(
                "Operation cannot be fulfilled on {} \"{}\": Precondition failed: {}",
                rt.qualified_name(),
                name,
                what
            ),
        )
        .with_details(rt, name)
    }

    /// Server-side apply conflicts: one cause per conflicting field.
    pub(crate) fn apply_conflict(
        rt: &ResourceType,
        name: &str,
        conflicts: &[(String, String)],
    ) -> Self {
        let lines: Vec<String> = conflicts
            .iter()
            .map(|(manager, field)| format!("conflict with \"{manager}\": {field}"))
            .collect();
        let message = if lines.len() == 1 {
            format!("Apply failed with 1 conflict: {}", lines[0])
        } else {
            format!(
                "Apply failed with {} conflicts: {}",
                lines.len(),
                lines.join("\n")
            )
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .zip(&lines)
            .map(|((_, field), line)| {
                json!({"reason": "FieldManagerConflict", "message": line, "field": field})
            })
            .collect();
        ApiError {
            code: 409,
            reason: "Conflict".into(),
            message,
            details: Some(json!({
                "name": name,
                "group": rt.group,
                "kind": rt.plural,
                "causes": causes,
            })),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::with_code(400, message)
    }

    pub(crate) fn invalid(rt: &ResourceType, name: &str, message: impl Into<String>) -> Self {
        ApiError::with_code(
            422,
            format!("{} \"{}\" is invalid: {}", rt.kind, name, message.into()),
        )
        .with_details(rt, name)
    }

    /// 422 for list and watch parameters that do not go together.
    pub(crate) fn invalid_list_options(message: &str) -> Self {
        ApiError {
            code: 422,
            reason: "Invalid".into(),
            message: format!("ListOptions.meta.k8s.io \"\" is invalid: {message}"),
            details: Some(json!({"group": "meta.k8s.io", "kind": "ListOptions"})),
        }
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        ApiError::with_code(403, message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::with_code(405, message)
    }

    pub(crate) fn unsupported_media_type(content_type: &str) -> Self {
        ApiError::with_code(
            415,
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"),
        )
    }

    pub(crate) fn expired(requested: u64, oldest: u64) -> Self {
        ApiError::with_code(
            410,
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    pub(crate) fn path_not_found(path: &str) -> Self {
        ApiError::with_code(
            404,
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// The `Status` object sent to clients.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// `Status.reason` Kubernetes uses for an HTTP code.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_has_the_real_status_shape() {
        let rt = ResourceType::builtin("apps", "v1", "Deployment", "deployments", true, true);
        let status = ApiError::not_found(&rt, "web").to_status();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["code"], 404);
        assert_eq!(status["message"], "deployments.apps \"web\" not found");
        assert_eq!(status["details"]["kind"], "deployments");
        assert_eq!(status["details"]["group"], "apps");
    }
}
