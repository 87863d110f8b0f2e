//! The container that pulls an `oci://` model artifact into the cache
//! volume: `flexinfer-flashload pull` from the flash-loader image (no other
//! tool needed), with the registry Secret, when one is named, mounted
//! (its `.dockerconfigjson`) and passed as AWS keys (its
//! `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token` and
//! `aws_region`, for ECR); every key is optional.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, KeyToPath, PodSecurityContext, ResourceRequirements,
    SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Name of the pulling container.
pub const PULLER: &str = "oci-puller";
/// Volume of the registry credentials.
pub const CREDENTIALS_VOLUME: &str = "registry-credentials";
/// Where the credentials Secret is mounted.
pub const CREDENTIALS_DIR: &str = "/var/run/secrets/flexinfer/registry";
/// Key of a `kubernetes.io/dockerconfigjson` Secret.
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";
/// `Model.spec.config` key naming the registry Secret of an `oci://`
/// source (the ModelCache field has the same name).
pub const SECRET_CONFIG_KEY: &str = "ociRegistrySecretRef";
/// User of the FlexInfer runtime images; the pod's `fsGroup`, so that the
/// non-root puller can write into a fresh volume.
pub const RUNTIME_GROUP: i64 = 65532;

/// The pulling container and, with a Secret, its volume.
pub struct OciPull {
    /// The container.
    pub container: Container,
    /// The credentials volume, when a Secret is named.
    pub volume: Option<Volume>,
}

/// Pulls `oci://<reference>` into `dest`, mounting `model_mount` (the
/// cache volume's mount) and the Secret `secret` when given.
pub fn pull(
    reference: &str,
    dest: &str,
    image: &str,
    secret: Option<&str>,
    model_mount: VolumeMount,
) -> OciPull {
    let mut command = vec![
        "flexinfer-flashload".to_owned(),
        "pull".to_owned(),
        format!("oci://{reference}"),
        "--dest".to_owned(),
        dest.to_owned(),
        "--progress".to_owned(),
        "log".to_owned(),
    ];
    let mut mounts = vec![model_mount];
    let secret = secret.filter(|s| !s.is_empty());
    let volume = secret.map(|name| {
        command.push("--docker-config".to_owned());
        command.push(format!("{CREDENTIALS_DIR}/{DOCKER_CONFIG_KEY}"));
        mounts.push(VolumeMount {
            name: CREDENTIALS_VOLUME.to_owned(),
            mount_path: CREDENTIALS_DIR.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
        Volume {
            name: CREDENTIALS_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.to_owned()),
                items: Some(vec![KeyToPath {
                    key: DOCKER_CONFIG_KEY.to_owned(),
                    path: DOCKER_CONFIG_KEY.to_owned(),
                    mode: None,
                }]),
                optional: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    });
    let env = secret.map(|name| {
        [
            ("AWS_ACCESS_KEY_ID", "aws_access_key_id"),
            ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
            ("AWS_SESSION_TOKEN", "aws_session_token"),
            ("AWS_REGION", "aws_region"),
        ]
        .into_iter()
        .map(|(var, key)| EnvVar {
            name: var.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: name.to_owned(),
                    key: key.to_owned(),
                    optional: Some(true),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
    });
    let container = Container {
        name: PULLER.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(command),
        env,
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("100m".to_owned())),
                ("memory".to_owned(), Quantity("128Mi".to_owned())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("512Mi".to_owned()),
            )])),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    OciPull { container, volume }
}

/// The pod security context of pull Jobs (`fsGroup` of the runtime user).
pub fn security_context() -> PodSecurityContext {
    PodSecurityContext {
        fs_group: Some(RUNTIME_GROUP),
        ..Default::default()
    }
}
