//! Parsing of `Model.spec.source` URIs.

use std::fmt;

/// Where a model's weights come from, parsed from `spec.source`.
///
/// Schemes are matched case-insensitively (`HF://`, `hf://`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// `HF://org/model`: a HuggingFace repository, prefetched into the cache.
    HuggingFace {
        /// `org/model`.
        repo: String,
    },
    /// `ollama://model:tag`: pulled by the ollama server itself.
    Ollama {
        /// `model:tag`.
        model: String,
    },
    /// `file:///path`: a path already present in the container.
    File {
        /// Absolute path.
        path: String,
    },
    /// `oci://registry[:port]/repository[:tag|@sha256:…]` (or `oras://`): a
    /// model artifact in an OCI registry, pulled into the cache by
    /// `flexinfer-flashload pull`.
    Oci {
        /// The reference without its scheme (`ghcr.io/org/model:v1`).
        reference: String,
    },
    /// `pvc://claim/path`: files on an existing PersistentVolumeClaim.
    Pvc {
        /// Claim name.
        claim: String,
        /// Path inside the claim, without leading slash (may be empty).
        path: String,
    },
    /// Anything else, kept verbatim (e.g. a bare model name).
    Other(String),
}

impl ModelSource {
    /// Parses a source URI; never fails, unknown forms become
    /// [`ModelSource::Other`].
    pub fn parse(source: &str) -> ModelSource {
        let source = source.trim();
        let Some((scheme, rest)) = source.split_once("://") else {
            return ModelSource::Other(source.to_owned());
        };
        match scheme.to_ascii_lowercase().as_str() {
            "hf" | "huggingface" => ModelSource::HuggingFace {
                repo: rest.to_owned(),
            },
            "ollama" => ModelSource::Ollama {
                model: rest.to_owned(),
            },
            "oci" | "oras" => ModelSource::Oci {
                reference: rest.to_owned(),
            },
            "file" => ModelSource::File {
                path: rest.to_owned(),
            },
            "pvc" => {
                let (claim, path) = rest.split_once('/').unwrap_or((rest, ""));
                ModelSource::Pvc {
                    claim: claim.to_owned(),
                    path: path.trim_start_matches('/').to_owned(),
                }
            }
            _ => ModelSource::Other(source.to_owned()),
        }
    }

    /// The name the backend knows the model by when no `servedModelName` is
    /// configured: the source with its scheme stripped (`HF://org/m` →
    /// `org/m`, `ollama://m:tag` → `m:tag`, `file:///p` → `/p`,
    /// `pvc://claim/p` → `/p`, `oci://r/m:t` → `r/m:t`).
    pub fn backend_model_name(&self) -> String {
        match self {
            ModelSource::HuggingFace { repo } => repo.clone(),
            ModelSource::Ollama { model } => model.clone(),
            ModelSource::Oci { reference } => reference.clone(),
            ModelSource::File { path } => path.clone(),
            ModelSource::Pvc { path, .. } => format!("/{path}"),
            ModelSource::Other(raw) => raw.clone(),
        }
    }

    /// Whether the weights must be downloaded from a registry
    /// (HuggingFace, OCI) before the backend can start.
    pub fn needs_prefetch(&self) -> bool {
        matches!(
            self,
            ModelSource::HuggingFace { .. } | ModelSource::Oci { .. }
        )
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSource::HuggingFace { repo } => write!(f, "HF://{repo}"),
            ModelSource::Ollama { model } => write!(f, "ollama://{model}"),
            ModelSource::Oci { reference } => write!(f, "oci://{reference}"),
            ModelSource::File { path } => write!(f, "file://{path}"),
            ModelSource::Pvc { claim, path } => write!(f, "pvc://{claim}/{path}"),
            ModelSource::Other(raw) => f.write_str(raw),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        assert_eq!(
            ModelSource::parse("HF://Qwen/Qwen3-8B"),
            ModelSource::HuggingFace {
                repo: "Qwen/Qwen3-8B".into()
            }
        );
        assert_eq!(
            ModelSource::parse("ollama://llama3:8b"),
            ModelSource::Ollama {
                model: "llama3:8b".into()
            }
        );
        assert_eq!(
            ModelSource::parse("file:///models/x"),
            ModelSource::File {
                path: "/models/x".into()
            }
        );
        assert_eq!(
            ModelSource::parse("pvc://models/qwen/q4.gguf"),
            ModelSource::Pvc {
                claim: "models".into(),
                path: "qwen/q4.gguf".into()
            }
        );
        assert_eq!(
            ModelSource::parse("pvc://models"),
            ModelSource::Pvc {
                claim: "models".into(),
                path: String::new()
            }
        );
        assert_eq!(
            ModelSource::parse("oci://ghcr.io/org/m:v1"),
            ModelSource::Oci {
                reference: "ghcr.io/org/m:v1".into()
            }
        );
        assert_eq!(
            ModelSource::parse("ORAS://r.lan/m@sha256:ab"),
            ModelSource::Oci {
                reference: "r.lan/m@sha256:ab".into()
            }
        );
        assert_eq!(
            ModelSource::parse("llama3"),
            ModelSource::Other("llama3".into())
        );
    }

    #[test]
    fn backend_model_name_strips_the_scheme() {
        let cases = [
            ("HF://org/m", "org/m"),
            ("hf://org/m", "org/m"),
            ("ollama://m:tag", "m:tag"),
            ("file:///p", "/p"),
            ("pvc://claim/dir/file", "/dir/file"),
        ];
        for (source, name) in cases {
            assert_eq!(
                ModelSource::parse(source).backend_model_name(),
                name,
                "{source}"
            );
        }
        assert!(ModelSource::parse("HF://org/m").needs_prefetch());
        assert!(ModelSource::parse("oci://r.lan/m:v1").needs_prefetch());
        assert!(!ModelSource::parse("ollama://m").needs_prefetch());
    }

    #[test]
    fn display_round_trips() {
        for source in [
            "HF://org/m",
            "ollama://m:tag",
            "file:///p",
            "pvc://claim/dir",
            "oci://ghcr.io/org/m:v1",
        ] {
            assert_eq!(ModelSource::parse(source).to_string(), source);
        }
    }
}
