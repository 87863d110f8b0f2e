//! The `pull` subcommand: credentials from the flags, a registry client,
//! the pull itself on a small tokio runtime, and progress like the
//! preload's (a bar on a terminal, log lines otherwise).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};

use crate::artifact::{pull_manifest, PullSummary};
use crate::cli::{PullArgs, RegistryKindArg};
use crate::progress::{Counters, Reporter};
use flexinfer_oci::credentials::{from_docker_config_file, Credentials};
use flexinfer_oci::{ecr, ClientOptions, Reference, RegistryClient, RegistryKind};

impl From<RegistryKindArg> for RegistryKind {
    fn from(kind: RegistryKindArg) -> RegistryKind {
        match kind {
            RegistryKindArg::Generic => RegistryKind::Generic,
            RegistryKindArg::Harbor => RegistryKind::Harbor,
            RegistryKindArg::Ghcr => RegistryKind::Ghcr,
            RegistryKindArg::Ecr => RegistryKind::Ecr,
        }
    }
}

/// The credentials the flags point at, for `reference`'s registry.
pub fn credentials(args: &PullArgs, reference: &Reference) -> Result<Option<Credentials>> {
    if let (Some(user), Some(pass)) = (&args.username_env, &args.password_env) {
        return Ok(Some(Credentials::from_env(user, pass)?));
    }
    if let Some(path) = &args.docker_config {
        if !path.exists() {
            // A mounted Secret without .dockerconfigjson (AWS keys only).
            tracing::info!(
                "{} does not exist: no registry credentials from it",
                path.display()
            );
            return Ok(None);
        }
        let found = from_docker_config_file(path, &reference.registry)?;
        if found.is_none() {
            tracing::warn!(
                "{} has no entry for {}: pulling anonymously",
                path.display(),
                reference.registry
            );
        }
        return Ok(found);
    }
    Ok(None)
}

/// ECR credentials from AWS keys in the environment, when the registry is
/// ECR and no other credentials were given.
async fn ecr_login(args: &PullArgs, reference: &Reference) -> Result<Option<Credentials>> {
    let Some(keys) = ecr::AwsCredentials::from_env() else {
        return Ok(None);
    };
    let region = ecr::region_of(&reference.registry)
        .or_else(|| args.ecr_region.clone())
        .with_context(|| {
            format!(
                "cannot tell the ECR region of {} (set --ecr-region or AWS_REGION)",
                reference.registry
            )
        })?;
    let endpoint = args
        .ecr_endpoint
        .clone()
        .unwrap_or_else(|| ecr::endpoint(&region));
    let http = reqwest::Client::builder()
        .connect_timeout(flexinfer_oci::client::CONNECT_TIMEOUT)
        .build()?;
    let credentials = ecr::login(&http, &endpoint, &region, &keys, SystemTime::now()).await?;
    tracing::info!(
        "logged in to ECR in {region} with access key {}",
        keys.access_key_id
    );
    Ok(Some(credentials))
}

/// Runs `pull` and returns its final line.
pub fn run(args: &PullArgs) -> Result<String> {
    let reference = Reference::parse(&args.reference)?;
    let kind = args
        .registry_kind
        .map(RegistryKind::from)
        .unwrap_or_else(|| RegistryKind::detect(&reference.registry));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut credentials = credentials(args, &reference)?;
    if credentials.is_none() && kind == RegistryKind::Ecr {
        credentials = runtime.block_on(ecr_login(args, &reference))?;
    }
    let options = ClientOptions {
        credentials,
        plain_http: args.plain_http.then_some(true),
        kind: Some(kind),
        request_timeout: None,
        page_size: None,
    };
    let client = RegistryClient::new(&reference.registry, options)?;
    let summary: PullSummary = runtime.block_on(async {
        // The total is known once the manifest is read; the reporter
        // shows bytes received against the artifact's size.
        let started = Instant::now();
        let fetched = client.manifest(&reference).await?;
        let counters = Counters::new(fetched.manifest.layers_size());
        let reporter = Reporter::start("pull", counters.clone(), args.progress, args.log_interval);
        let result = pull_manifest(
            &client,
            &reference,
            fetched,
            &args.dest,
            Some(Arc::clone(&counters)),
            started,
            args.jobs,
        )
        .await;
        reporter.finish();
        result
    })?;
    Ok(summary.line(&args.dest))
}
