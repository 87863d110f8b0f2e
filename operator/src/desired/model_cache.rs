//! Objects of a v1alpha1 `ModelCache` with the SharedPVC strategy: the PVC
//! and the downloader Job.

use std::collections::BTreeMap;

use flexinfer_crds::v1alpha1::ModelCache;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::download::{cache_pvc, DownloadSource, HfDownload};
use super::BuildSettings;

pub use super::download::HF_IMAGE;

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
        owner_references: super::controller_owner(cache).map(|o| vec![o]),
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
    Some(cache_pvc(
        meta(cache, pvc_name(cache)),
        "ReadWriteMany",
        cache.spec.cluster_storage_class_name.clone(),
        cache.spec.storage_size.clone(),
    ))
}

/// The Job downloading the source into the PVC: `flexinfer-flashload
/// pull` (from the flash-loader image of `settings`) for `oci://` and
/// `oras://` sources, with `ociRegistrySecretRef` mounted; a Hugging Face
/// download (authenticated by the `HF_TOKEN` key of `secretRef`) otherwise.
pub fn download_job(cache: &ModelCache, settings: &BuildSettings) -> Job {
    let dest = format!("/models/{}", model_path(cache));
    let source = cache.spec.source.trim();
    let reference = source.split_once("://").map_or(source, |(_, r)| r);
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
    let mut meta = meta(cache, job_name(cache));
    let download = if cache.spec.is_oci_source() {
        if let Some(labels) = meta.labels.as_mut() {
            labels.insert(
                "app.kubernetes.io/component".to_owned(),
                "oci-puller".to_owned(),
            );
        }
        DownloadSource::Oci {
            reference,
            flash_loader_image: &settings.flash_loader_image,
            secret: cache.spec.oci_registry_secret_ref.as_deref(),
        }
    } else {
        DownloadSource::HuggingFace(HfDownload {
            repo: reference,
            token_secret: cache.spec.secret_ref.as_deref(),
            memory: ("512Mi", "2Gi"),
            ..Default::default()
        })
    };
    super::download::download_job(meta, &download, &dest, store_volume, store_mount)
}
