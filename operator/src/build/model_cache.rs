//! Objects of a v1alpha1 `ModelCache` with the SharedPVC strategy: the PVC
//! and the downloader Job.

use std::collections::BTreeMap;

use flexinfer_crds::v1alpha1::ModelCache;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretKeySelector, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::deployment::env_var;
use super::{oci, BuildSettings};

/// Image of Hugging Face downloads.
pub const HF_IMAGE: &str = "python:3.10-slim";

/// Name of the PVC holding the cache.
pub fn pvc_name(cache: &ModelCache) -> String {
    cache
        .spec
        .existing_claim_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| cache.name_any())
}

/// Directory of the model inside the PVC.
pub fn model_path(cache: &ModelCache) -> String {
    cache
        .spec
        .model_path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| cache.name_any())
}

/// Name of the downloader Job.
pub fn job_name(cache: &ModelCache) -> String {
    format!("{}-downloader", cache.name_any())
}

fn meta(cache: &ModelCache, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cache.namespace(),
        labels: Some(BTreeMap::from([
            (
                "app.kubernetes.io/name".to_owned(),
                "modelcache-downloader".to_owned(),
            ),
            ("app.kubernetes.io/instance".to_owned(), cache.name_any()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "flexinfer".to_owned(),
            ),
        ])),
        owner_references: cache.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

/// The cache PVC (ReadWriteMany), `None` with `existingClaimName`.
pub fn pvc(cache: &ModelCache) -> Option<PersistentVolumeClaim> {
    if cache
        .spec
        .existing_claim_name
        .as_ref()
        .is_some_and(|n| !n.is_empty())
    {
        return None;
    }
    Some(PersistentVolumeClaim {
        metadata: meta(cache, pvc_name(cache)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteMany".to_owned()]),
            storage_class_name: cache.spec.cluster_storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(cache.spec.storage_size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

/// The Job downloading the source into the PVC: `flexinfer-flashload
/// pull` (from the flash-loader image of `settings`) for `oci://` and
/// `oras://` sources, with `ociRegistrySecretRef` mounted; a Hugging Face
/// download otherwise.
pub fn download_job(cache: &ModelCache, settings: &BuildSettings) -> Job {
    let dest = format!("/models/{}", model_path(cache));
    let source = cache.spec.source.trim().to_owned();
    let store_mount = VolumeMount {
        name: "model-store".to_owned(),
        mount_path: "/models".to_owned(),
        ..Default::default()
    };
    let store_volume = Volume {
        name: "model-store".to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc_name(cache),
            read_only: None,
        }),
        ..Default::default()
    };
    if cache.spec.is_oci_source() {
        let reference = source
            .split_once("://")
            .map_or(source.as_str(), |(_, r)| r)
            .to_owned();
        let pull = oci::pull(
            &reference,
            &dest,
            &settings.flash_loader_image,
            cache.spec.oci_registry_secret_ref.as_deref(),
            store_mount,
        );
        let mut meta = meta(cache, job_name(cache));
        if let Some(labels) = meta.labels.as_mut() {
            labels.insert(
                "app.kubernetes.io/component".to_owned(),
                "oci-puller".to_owned(),
            );
        }
        return Job {
            metadata: meta,
            spec: Some(JobSpec {
                backoff_limit: Some(3),
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        restart_policy: Some("OnFailure".to_owned()),
                        containers: vec![pull.container],
                        volumes: Some(std::iter::once(store_volume).chain(pull.volume).collect()),
                        security_context: Some(oci::security_context()),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            status: None,
        };
    }
    let repo = source
        .split_once("://")
        .map_or(source.as_str(), |(_, r)| r)
        .to_owned();
    let script = format!("set -e\nif [ -n \"$(ls -A \"$DEST\" 2>/dev/null)\" ]; then echo cached; exit 0; fi\npip install --quiet huggingface_hub\npython -c \"import os; from huggingface_hub import snapshot_download; snapshot_download('{repo}', local_dir=os.environ['DEST'])\"\n");
    let mut env = vec![
        env_var("DEST", &dest),
        env_var("HF_HUB_ENABLE_HF_TRANSFER", "0"),
    ];
    if let Some(secret) = cache.spec.secret_ref.clone().filter(|s| !s.is_empty()) {
        env.push(EnvVar {
            name: "HF_TOKEN".to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret,
                    key: "HF_TOKEN".to_owned(),
                    optional: Some(true),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    Job {
        metadata: meta(cache, job_name(cache)),
        spec: Some(JobSpec {
            backoff_limit: Some(3),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("OnFailure".to_owned()),
                    containers: vec![Container {
                        name: "downloader".to_owned(),
                        image: Some(HF_IMAGE.to_owned()),
                        command: Some(vec!["sh".to_owned(), "-c".to_owned(), script]),
                        env: Some(env),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".to_owned(), Quantity("100m".to_owned())),
                                ("memory".to_owned(), Quantity("512Mi".to_owned())),
                            ])),
                            limits: Some(BTreeMap::from([(
                                "memory".to_owned(),
                                Quantity("2Gi".to_owned()),
                            )])),
                            ..Default::default()
                        }),
                        volume_mounts: Some(vec![store_mount]),
                        ..Default::default()
                    }],
                    volumes: Some(vec![store_volume]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}
