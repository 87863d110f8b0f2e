//! Image manifests (OCI image manifest v1 and Docker v2 schema 2, the two
//! forms artifact pushes produce) and the file names of their layers.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::error::OciError;

/// Marker a complete pull writes into its destination directory (no
/// layer may take its name).
pub const PULL_MARKER_NAME: &str = ".flexinfer-oci-pull.json";

/// OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker v2 schema 2 manifest media type.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// OCI image index media type (not pulled: model artifacts have one
/// manifest, not one per platform).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker manifest list media type (not pulled either).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The `Accept` header of manifest requests.
pub const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json;q=0.9, \
application/vnd.oci.image.index.v1+json;q=0.5, \
application/vnd.docker.distribution.manifest.list.v2+json;q=0.5";
/// Annotation holding a layer's file name (what `oras push` writes).
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// A content descriptor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the content.
    #[serde(default)]
    pub media_type: String,
    /// Digest of the content.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
    /// Annotations (`org.opencontainers.image.title`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The layer's `org.opencontainers.image.title`, if any.
    pub fn title(&self) -> Option<&str> {
        self.annotations.get(TITLE_ANNOTATION).map(String::as_str)
    }
}

/// An image manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// Media type, when the body states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Artifact type (OCI 1.1), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers: one per file of the artifact.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Manifest annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    /// Parses a manifest body; `content_type` is the response's
    /// `Content-Type`. Indexes and schema 1 manifests are refused.
    pub fn parse(
        bytes: &[u8],
        content_type: Option<&str>,
        reference: &str,
    ) -> Result<Manifest, OciError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Probe {
            #[serde(default)]
            media_type: Option<String>,
            #[serde(default)]
            schema_version: Option<u32>,
        }
        let unsupported = |media_type: String| OciError::UnsupportedManifest {
            reference: reference.to_owned(),
            media_type,
        };
        let probe: Probe = serde_json::from_slice(bytes)
            .map_err(|e| unsupported(format!("unparsable JSON: {e}")))?;
        let header_type = content_type
            .map(|c| c.split(';').next().unwrap_or_default().trim().to_owned())
            .filter(|c| !c.is_empty() && c != "application/json");
        let media_type = probe
            .media_type
            .clone()
            .or(header_type)
            .unwrap_or_else(|| OCI_MANIFEST.to_owned());
        if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
            return Err(unsupported(media_type));
        }
        if probe.schema_version != Some(2) {
            return Err(unsupported(format!(
                "{media_type} with schemaVersion {:?}",
                probe.schema_version
            )));
        }
        serde_json::from_slice(bytes).map_err(|e| unsupported(format!("{media_type}: {e}")))
    }

    /// Sum of the layer sizes.
    pub fn layers_size(&self) -> u64 {
        self.layers.iter().map(|l| l.size).sum()
    }

    /// The file name of every layer, in order, checked with
    /// [`safe_title`]; two layers with one name are refused.
    pub fn file_names(&self) -> Result<Vec<String>, OciError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let name = safe_title(layer)?;
            if !seen.insert(name.clone()) {
                return Err(OciError::UnsafeTitle {
                    digest: layer.digest.clone(),
                    title: format!("{name} (used by two layers)"),
                });
            }
            out.push(name);
        }
        Ok(out)
    }
}

/// The layer's title if it is a plain file name: not empty, no `/` or `\`,
/// not `.` or `..`, no NUL, and not a name the puller uses itself
/// (`*.partial`, the completion marker).
pub fn safe_title(layer: &Descriptor) -> Result<String, OciError> {
    let title = layer.title().unwrap_or_default();
    let bad = title.is_empty()
        || title == "."
        || title == ".."
        || title.contains(['/', '\\', '\0'])
        || title.ends_with(super::blob::PARTIAL_SUFFIX)
        || title == PULL_MARKER_NAME;
    if bad {
        return Err(OciError::UnsafeTitle {
            digest: layer.digest.clone(),
            title: title.to_owned(),
        });
    }
    Ok(title.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(title: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: "application/octet-stream".into(),
            digest: Digest::of(title.unwrap_or_default().as_bytes()),
            size: 1,
            annotations: title
                .map(|t| BTreeMap::from([(TITLE_ANNOTATION.to_owned(), t.to_owned())]))
                .unwrap_or_default(),
        }
    }

    #[test]
    fn titles_must_be_plain_file_names() {
        assert_eq!(
            safe_title(&layer(Some("model.gguf"))).unwrap(),
            "model.gguf"
        );
        for bad in [
            None,
            Some(""),
            Some(".."),
            Some("../etc/passwd"),
            Some("/etc/passwd"),
            Some("dir/file"),
            Some("a\\b"),
            Some("x.partial"),
        ] {
            assert!(safe_title(&layer(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_oras_manifests_and_refuses_indexes() {
        let body = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.unknown.config.v1+json",
                       "digest": Digest::of(b"{}").to_string(), "size": 2},
            "layers": [{"mediaType": "application/octet-stream",
                        "digest": Digest::of(b"abc").to_string(), "size": 3,
                        "annotations": {TITLE_ANNOTATION: "config.json"}}]
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        let m = Manifest::parse(&bytes, Some(OCI_MANIFEST), "r").unwrap();
        assert_eq!(m.file_names().unwrap(), ["config.json"]);
        assert_eq!(m.layers_size(), 3);
        let index =
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []});
        let err = Manifest::parse(&serde_json::to_vec(&index).unwrap(), None, "r").unwrap_err();
        assert!(err.to_string().contains("index"), "{err}");
    }
}
