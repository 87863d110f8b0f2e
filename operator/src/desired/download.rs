//! The Job that fills a cache volume, shared by a Model's prefetch
//! ([`super::cache`]) and a v1alpha1 `ModelCache` ([`super::model_cache`]):
//! one downloader container (Hugging Face, or `flexinfer-flashload pull`
//! for OCI sources) writing into the cache PVC, retried three times.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SecretKeySelector, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::deployment::env_var;
use super::oci;

/// Image of Hugging Face downloads.
pub const HF_IMAGE: &str = "python:3.10-slim";
/// Marker file a finished download leaves in the model directory; a
/// directory without it (an interrupted download) is downloaded again.
pub const CACHED_MARKER: &str = ".flexinfer_cached";

/// Where a download comes from.
#[derive(Debug, Clone)]
pub enum DownloadSource<'a> {
    /// A Hugging Face repository.
    HuggingFace(HfDownload<'a>),
    /// An OCI artifact reference (`registry/repo:tag`), pulled with the
    /// flash-loader image; `secret` names a `kubernetes.io/dockerconfigjson`
    /// Secret of registry credentials.
    Oci {
        /// Artifact reference without scheme.
        reference: &'a str,
        /// Image holding `flexinfer-flashload`.
        flash_loader_image: &'a str,
        /// Registry credentials Secret.
        secret: Option<&'a str>,
    },
}

/// A Hugging Face snapshot download. The repository, revision and file
/// patterns travel as environment variables, never inside the script.
#[derive(Debug, Clone, Default)]
pub struct HfDownload<'a> {
    /// Repository id (`org/name`).
    pub repo: &'a str,
    /// Only files matching these patterns (all when empty).
    pub allow_patterns: Vec<String>,
    /// Branch, tag or commit.
    pub revision: Option<&'a str>,
    /// Secret whose `HF_TOKEN` key authenticates the download (optional).
    pub token_secret: Option<&'a str>,
    /// `HF_HOME` (the hub's own cache), when it should live on the volume.
    pub hf_home: Option<String>,
    /// Memory request and limit of the container.
    pub memory: (&'static str, &'static str),
}

/// The download Job: `meta` names it, `dest` is the model directory inside
/// `mount`, and `store` is the volume `mount` refers to.
pub fn download_job(
    meta: ObjectMeta,
    source: &DownloadSource<'_>,
    dest: &str,
    store: Volume,
    mount: VolumeMount,
) -> Job {
    let mut volumes = vec![store];
    let (container, security_context): (Container, Option<PodSecurityContext>) = match source {
        DownloadSource::HuggingFace(hf) => (hf_container(hf, dest, mount), None),
        DownloadSource::Oci {
            reference,
            flash_loader_image,
            secret,
        } => {
            let pull = oci::pull(reference, dest, flash_loader_image, *secret, mount);
            volumes.extend(pull.volume);
            (pull.container, Some(oci::security_context()))
        }
    };
    Job {
        metadata: meta,
        spec: Some(JobSpec {
            backoff_limit: Some(3),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("OnFailure".to_owned()),
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context,
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// A PVC of `size` with one access mode.
pub fn cache_pvc(
    meta: ObjectMeta,
    access_mode: &str,
    storage_class: Option<String>,
    size: String,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![access_mode.to_owned()]),
            storage_class_name: storage_class,
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(size))])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The container downloading a Hugging Face repository into `$DEST`,
/// skipping the download when the marker of a finished one is there.
fn hf_container(hf: &HfDownload<'_>, dest: &str, mount: VolumeMount) -> Container {
    let script = format!(
        "set -e\nif [ -f \"$DEST/{CACHED_MARKER}\" ]; then echo cached; exit 0; fi\n\
         pip install --quiet huggingface_hub\n\
         python -c \"import json,os; from huggingface_hub import snapshot_download; \
         allow=json.loads(os.environ.get('HF_ALLOW_PATTERNS') or 'null'); \
         snapshot_download(os.environ['HF_REPO'], local_dir=os.environ['DEST'], allow_patterns=allow, revision=os.environ.get('HF_REVISION') or None)\"\n\
         touch \"$DEST/{CACHED_MARKER}\"\n"
    );
    let mut env = vec![
        env_var("HF_REPO", hf.repo),
        env_var("DEST", dest),
        env_var("HF_HUB_ENABLE_HF_TRANSFER", "0"),
    ];
    if let Some(home) = &hf.hf_home {
        env.push(env_var("HF_HOME", home));
    }
    if !hf.allow_patterns.is_empty() {
        env.push(env_var(
            "HF_ALLOW_PATTERNS",
            &serde_json::Value::from(hf.allow_patterns.clone()).to_string(),
        ));
    }
    if let Some(rev) = hf.revision.filter(|r| !r.is_empty()) {
        env.push(env_var("HF_REVISION", rev));
    }
    if let Some(secret) = hf.token_secret.filter(|s| !s.is_empty()) {
        env.push(EnvVar {
            name: "HF_TOKEN".to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: "HF_TOKEN".to_owned(),
                    optional: Some(true),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let (request, limit) = hf.memory;
    Container {
        name: "downloader".to_owned(),
        image: Some(HF_IMAGE.to_owned()),
        command: Some(vec!["sh".to_owned(), "-c".to_owned(), script]),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("100m".to_owned())),
                ("memory".to_owned(), Quantity(request.to_owned())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity(limit.to_owned()),
            )])),
            ..Default::default()
        }),
        volume_mounts: Some(vec![mount]),
        ..Default::default()
    }
}
