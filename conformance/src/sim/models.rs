//! Which model names the simulator accepts: the served base models plus the
//! LoRA adapters loaded at start or at run time, with vLLM's rules and
//! messages for loading and unloading.

use std::sync::{PoisonError, RwLock};

use serde::Serialize;

use super::config::LoraModule;
use super::error::ApiError;

/// A loaded LoRA adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    /// Name clients use as `model`.
    pub name: String,
    /// The `lora_path` it was loaded from.
    pub path: String,
    /// Unix seconds when it was loaded.
    pub created: u64,
}

/// The served names; adapters change at run time, base models never do.
#[derive(Debug)]
pub struct ModelRegistry {
    base: Vec<String>,
    max_model_len: u32,
    created: u64,
    adapters: RwLock<Vec<Adapter>>,
}

/// One entry of `/v1/models`, shaped like vLLM's `ModelCard`.
#[derive(Debug, Serialize)]
pub struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    root: &'a str,
    parent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_model_len: Option<u32>,
}

#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelCard<'a>>,
}

impl ModelRegistry {
    /// A registry of `base` models (the first is the default) and initial adapters.
    pub fn new(
        base: Vec<String>,
        lora_modules: &[LoraModule],
        max_model_len: u32,
        now: u64,
    ) -> Self {
        let adapters = lora_modules
            .iter()
            .map(|m| Adapter {
                name: m.name.clone(),
                path: m.path.clone(),
                created: now,
            })
            .collect();
        Self {
            base,
            max_model_len,
            created: now,
            adapters: RwLock::new(adapters),
        }
    }

    fn default_model(&self) -> &str {
        self.base.first().map_or("", String::as_str)
    }

    /// The name a request is served as: the requested one if it is a base
    /// model or a loaded adapter, the default when none is given, else 404.
    pub fn resolve(&self, requested: Option<&str>) -> Result<String, ApiError> {
        let Some(name) = requested else {
            return Ok(self.default_model().to_owned());
        };
        if self.base.iter().any(|m| m == name) || self.read().iter().any(|a| a.name == name) {
            Ok(name.to_owned())
        } else {
            Err(ApiError::model_not_found(name))
        }
    }

    /// The `/v1/models` response body.
    pub fn list_json(&self) -> Vec<u8> {
        let adapters = self.read();
        let root = self.default_model();
        let cards: Vec<ModelCard<'_>> = self
            .base
            .iter()
            .map(|name| ModelCard {
                id: name,
                object: "model",
                created: self.created,
                owned_by: "vllm",
                root: name,
                parent: None,
                max_model_len: Some(self.max_model_len),
            })
            .chain(adapters.iter().map(|a| ModelCard {
                id: &a.name,
                object: "model",
                created: a.created,
                owned_by: "vllm",
                root: &a.path,
                parent: Some(root),
                max_model_len: None,
            }))
            .collect();
        serde_json::to_vec(&ModelList {
            object: "list",
            data: cards,
        })
        .unwrap_or_default()
    }

    /// Loads an adapter as vLLM's `/v1/load_lora_adapter` does, returning its success text.
    pub fn load(&self, name: &str, path: &str, now: u64) -> Result<String, ApiError> {
        if name.is_empty() || path.is_empty() {
            return Err(invalid_input(
                "Both 'lora_name' and 'lora_path' must be provided.",
            ));
        }
        if self.base.iter().any(|m| m == name) {
            return Err(invalid_input(format!(
                "The lora adapter '{name}' has the name of a base model."
            )));
        }
        let mut adapters = self
            .adapters
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if adapters.iter().any(|a| a.name == name) {
            return Err(invalid_input(format!(
                "The lora adapter '{name}' has already been loaded."
            )));
        }
        adapters.push(Adapter {
            name: name.to_owned(),
            path: path.to_owned(),
            created: now,
        });
        Ok(format!(
            "Success: LoRA adapter '{name}' added successfully."
        ))
    }

    /// Unloads an adapter as vLLM's `/v1/unload_lora_adapter` does.
    pub fn unload(&self, name: &str) -> Result<String, ApiError> {
        if name.is_empty() {
            return Err(invalid_input(
                "either 'lora_name' and 'lora_int_id' needs to be provided.",
            ));
        }
        let mut adapters = self
            .adapters
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let before = adapters.len();
        adapters.retain(|a| a.name != name);
        if adapters.len() == before {
            return Err(ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "NotFoundError",
                format!("The lora adapter '{name}' cannot be found."),
            ));
        }
        Ok(format!(
            "Success: LoRA adapter '{name}' removed successfully."
        ))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Adapter>> {
        self.adapters.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// vLLM answers LoRA request mistakes 400 with type `InvalidUserInput`.
fn invalid_input(message: impl Into<String>) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "InvalidUserInput",
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn registry() -> ModelRegistry {
        ModelRegistry::new(vec!["base".into(), "other".into()], &[], 4096, 7)
    }

    #[test]
    fn resolves_defaults_and_rejects_unknown() {
        let r = registry();
        assert_eq!(r.resolve(None), Ok("base".into()));
        assert_eq!(r.resolve(Some("other")), Ok("other".into()));
        assert_eq!(r.resolve(Some("x")), Err(ApiError::model_not_found("x")));
    }

    #[test]
    fn lora_lifecycle_matches_vllm() {
        let r = registry();
        assert_eq!(
            r.load("sql", "/a", 9),
            Ok("Success: LoRA adapter 'sql' added successfully.".into())
        );
        assert_eq!(r.resolve(Some("sql")), Ok("sql".into()));
        let dup = r.load("sql", "/a", 9).expect_err("duplicate");
        assert_eq!(dup.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            dup.message,
            "The lora adapter 'sql' has already been loaded."
        );
        assert_eq!(
            r.load("", "/a", 9).expect_err("empty").kind,
            "InvalidUserInput"
        );

        let list: serde_json::Value = serde_json::from_slice(&r.list_json()).expect("json");
        let ids: Vec<_> = list["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|c| c["id"].clone())
            .collect();
        assert_eq!(ids, ["base", "other", "sql"]);
        assert_eq!(list["data"][2]["parent"], "base");
        assert_eq!(list["data"][2]["root"], "/a");

        assert!(r.unload("sql").is_ok());
        let missing = r.unload("sql").expect_err("gone");
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert_eq!(missing.message, "The lora adapter 'sql' cannot be found.");
        assert!(r.resolve(Some("sql")).is_err());
    }
}
