//! The kube-runtime loop of `ModelCatalog`: a reconcile syncs a catalog
//! when it is due (its `lastSyncTime` is older than `syncInterval`, or the
//! spec changed, or the last sync failed 30 s ago) and otherwise only
//! requeues for the moment it will be due, so the status write of a sync
//! (which wakes the controller again) does not start another one.
//!
//! The status it writes is bounded ([`crate::catalog::bounds`]): at most
//! the first thousand entries, and a message of at most 4 KiB.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flexinfer_crds::v1alpha2::{CatalogEntry, ModelCatalog, ModelCatalogStatus, RegistrySource};
use flexinfer_oci::credentials::from_docker_config;
use flexinfer_oci::{ecr, Credentials};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use super::apply::apply_status;
use super::conditions::{from_time, sort_conditions, to_time, Conditions};
use super::drive::{drive, retry_after};
use super::{check_crds_named, Context, Error};
use crate::catalog::{bounds, sync};

/// Field manager of the ModelCatalog controller.
pub const MANAGER: &str = "flexinfer-modelcatalog-controller";
/// The CRD the controller needs; without it the controller does not run.
pub const CRD: &str = "modelcatalogs.ai.flexinfer";
/// Shortest sync interval honoured (protects registries from a typo).
pub const MIN_SYNC_INTERVAL: Duration = Duration::from_secs(10);
/// Delay before a failed sync is tried again (or the interval, if shorter).
pub const FAILURE_RETRY: Duration = Duration::from_secs(30);
/// Condition type.
pub const READY: &str = "Ready";

/// Runs the ModelCatalog controller until `shutdown` completes. When the
/// ModelCatalog CRD is not installed (or may not be read) it logs why and
/// returns, leaving the other controllers running.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    if let Err(e) = check_crds_named(&ctx.client, &[CRD]).await {
        tracing::warn!(error = %e, "ModelCatalog controller not started");
        return;
    }
    let controller = Controller::new(
        ctx.watched_api::<ModelCatalog>(),
        watcher::Config::default(),
    );
    let error_policy = retry_after("modelcatalog", Duration::from_secs(5));
    drive(
        controller,
        reconcile,
        error_policy,
        ctx,
        shutdown,
        "modelcatalog",
    )
    .await;
}

/// Reconciles one ModelCatalog.
pub async fn reconcile(catalog: Arc<ModelCatalog>, ctx: Arc<Context>) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(catalog, ctx.clone()).await;
    ctx.metrics
        .observe("modelcatalog", start, &result, Error::reason);
    result
}

/// When `catalog` is next due for a sync (`None`: now).
pub fn next_sync(catalog: &ModelCatalog) -> Option<SystemTime> {
    let status = catalog.status.as_ref()?;
    let last = from_time(status.last_sync_time.as_ref()?);
    let ready = status.conditions.iter().find(|c| c.type_ == READY)?;
    if ready.observed_generation != catalog.meta().generation {
        return None;
    }
    let interval = catalog.spec.sync_interval().max(MIN_SYNC_INTERVAL);
    let wait = if ready.status == "True" {
        interval
    } else {
        interval.min(FAILURE_RETRY)
    };
    Some(last + wait)
}

async fn reconcile_inner(catalog: Arc<ModelCatalog>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = catalog.namespace().unwrap_or_else(|| "default".into());
    let api: Api<ModelCatalog> = ctx.api(&ns);
    let name = catalog.name_any();
    let Some(catalog) = api.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let now = ctx.now();
    if let Some(due) = next_sync(&catalog) {
        if now < due {
            return Ok(Action::requeue(due.duration_since(now).unwrap_or_default()));
        }
    }
    let mut prev = catalog.status.clone().unwrap_or_default();
    sort_conditions(&mut prev.conditions);
    let mut entries: Vec<CatalogEntry> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for source in &catalog.spec.registries {
        let label = source
            .url
            .clone()
            .unwrap_or_else(|| format!("{:?}", source.type_));
        let listed = match secret_credentials(&ctx, &ns, source).await {
            Ok(credentials) => sync::list(source, credentials, catalog.spec.filter.as_ref()).await,
            Err(e) => Err(e),
        };
        match listed {
            Ok(mut found) => entries.append(&mut found),
            Err(e) => {
                tracing::warn!(catalog = %name, registry = %label, error = %e, "catalog sync failed");
                // Keep what this registry listed before rather than
                // emptying the catalog on a transient failure.
                if let Some(prefix) = reference_prefix(source) {
                    entries.extend(
                        prev.entries
                            .iter()
                            .filter(|e| e.reference.starts_with(&prefix))
                            .cloned(),
                    );
                }
                errors.push(format!("{label}: {e}"));
            }
        }
    }
    entries.sort_by(|a, b| (&a.name, &a.reference).cmp(&(&b.name, &b.reference)));
    entries.dedup_by(|a, b| a.reference == b.reference);
    let total = entries.len();
    let (entries, left_out) = bounds::bound_entries(entries);
    let mut conds = Conditions::new(&prev.conditions, now, catalog.meta().generation);
    let ok = errors.is_empty();
    let message = bounds::bound_message(if ok && left_out == 0 {
        format!(
            "{total} models from {} registries",
            catalog.spec.registries.len()
        )
    } else if ok {
        format!(
            "{total} models from {} registries; status lists the first {}",
            catalog.spec.registries.len(),
            entries.len()
        )
    } else {
        errors.join("; ")
    });
    conds.set(
        READY,
        ok,
        if ok { "Synced" } else { "SyncFailed" },
        message.clone(),
    );
    let status = ModelCatalogStatus {
        total_models: Some(i32::try_from(total).unwrap_or(i32::MAX)),
        entries,
        last_sync_time: Some(to_time(now)),
        conditions: conds.into_vec(),
    };
    apply_status(&api, MANAGER, &catalog, &prev, &status).await?;
    let was_ok = prev
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map(|c| c.status == "True");
    if was_ok != Some(ok) {
        let obj = catalog.object_ref(&());
        if ok {
            ctx.events.normal(&obj, "CatalogSynced", message).await;
        } else {
            ctx.events.warning(&obj, "CatalogSyncFailed", message).await;
        }
    }
    let interval = catalog.spec.sync_interval().max(MIN_SYNC_INTERVAL);
    Ok(Action::requeue(if ok {
        interval
    } else {
        interval.min(FAILURE_RETRY)
    }))
}

/// `oci://<host>/` of an OCI source, to recognise its entries.
fn reference_prefix(source: &RegistrySource) -> Option<String> {
    let url = sync::parse_url(source.url.as_deref()?).ok()?;
    Some(format!("oci://{}/", url.registry))
}

/// Credentials of `source` from its Secret: keys `username`/`password`, a
/// `.dockerconfigjson` entry for the registry, or AWS keys
/// (`aws_access_key_id`, `aws_secret_access_key`, optional
/// `aws_session_token`, `aws_region` when the host does not name it,
/// `ecr_endpoint`) exchanged for an ECR token. Never logged.
async fn secret_credentials(
    ctx: &Context,
    ns: &str,
    source: &RegistrySource,
) -> Result<Option<Credentials>, String> {
    let Some(secret_name) = source.secret_ref.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let secrets: Api<Secret> = ctx.api(ns);
    let secret = secrets
        .get_opt(secret_name)
        .await
        .map_err(|e| format!("cannot read Secret {secret_name}: {e}"))?
        .ok_or_else(|| format!("Secret {secret_name} not found"))?;
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    if let (Some(username), Some(password)) = (text("username"), text("password")) {
        return Ok(Some(Credentials { username, password }));
    }
    let registry = source
        .url
        .as_deref()
        .map(sync::parse_url)
        .transpose()?
        .map(|u| u.registry)
        .unwrap_or_default();
    if let Some(config) = data.get(".dockerconfigjson") {
        return from_docker_config(&config.0, &registry)
            .map_err(|e| format!("Secret {secret_name}: {e}"));
    }
    if let (Some(access_key_id), Some(secret_access_key)) =
        (text("aws_access_key_id"), text("aws_secret_access_key"))
    {
        let keys = ecr::AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: text("aws_session_token"),
        };
        let region = ecr::region_of(&registry)
            .or_else(|| text("aws_region"))
            .ok_or_else(|| {
                format!("Secret {secret_name}: cannot tell the ECR region of {registry} (add key aws_region)")
            })?;
        let endpoint = text("ecr_endpoint").unwrap_or_else(|| ecr::endpoint(&region));
        return ecr::login(&ctx.http, &endpoint, &region, &keys, ctx.now())
            .await
            .map(Some)
            .map_err(|e| e.to_string());
    }
    Err(format!(
        "Secret {secret_name} has none of username/password, .dockerconfigjson or aws_access_key_id/aws_secret_access_key"
    ))
}
