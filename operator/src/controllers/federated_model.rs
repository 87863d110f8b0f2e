//! The v1alpha2 `FederatedModel` controller: places the template Model on
//! the selected member clusters and reports per-cluster status.
//!
//! Each reconcile: select clusters ([`crate::federation::selection`]),
//! split the replicas over the Ready ones
//! ([`crate::federation::distribution`]), server-side apply a `Model` with
//! the template as spec in every Ready cluster with a share (field manager
//! [`MANAGER`], labels pointing back to the FederatedModel, the share in
//! the [`REPLICAS_ANNOTATION`]), delete this FederatedModel's Models from
//! Ready clusters that should no longer run it, and write `status.clusters`,
//! `readyClusters`, `totalClusters` and the `ConfigValid`, `Placed` and
//! `Ready` conditions. A cluster that turns NotReady loses its share to the
//! Ready ones at once (the controller watches Clusters); its own Model is
//! left alone until it answers again. The finalizer [`FINALIZER`] deletes
//! the member Models from every Ready cluster when the FederatedModel is
//! deleted; clusters that are not Ready then are reported in a Warning
//! event and keep their Model.
//!
//! A member Model with the same name that does not carry this
//! FederatedModel's labels is never touched (status phase `Conflict`).

use super::drive::drive;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flexinfer_crds::v1alpha2::{
    Cluster, FederatedModel, FederatedModelClusterStatus, FederatedModelStatus, Model,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use super::apply::{apply_status, up_to_date, with_digest};
use super::conditions::{sort_conditions, Conditions};
use super::federation::FederationContext;
use super::{Context, Error};
use crate::federation::capacity;
use crate::federation::distribution::{self, Candidate};
use crate::federation::selection::{self, ClusterView, InvalidSelector, Selection};
use crate::federation::{
    is_member_of, member_labels, member_selector, FEDERATION_CLUSTER, FINALIZER, MANAGER,
    REPLICAS_ANNOTATION, STATUS_MANAGER,
};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "federatedmodel";
/// Requeue after a placement error (a member refused or did not answer).
pub const RETRY: Duration = Duration::from_secs(5);

/// Condition types.
pub mod condition {
    /// The spec (placement, routing) is valid.
    pub const CONFIG_VALID: &str = "ConfigValid";
    /// Every Ready selected cluster with a share has its Model.
    pub const PLACED: &str = "Placed";
    /// At least one cluster serves the model.
    pub const READY: &str = "Ready";
}

/// `status.clusters[].phase` values other than a member Model's phase.
pub mod phase {
    /// The member Model has no status yet.
    pub const PENDING: &str = "Pending";
    /// The cluster is selected but not Ready: it runs no share.
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// `placement.clusters` names a Cluster that does not exist.
    pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
    /// The cluster is Ready but its share is 0 (weight 0).
    pub const NO_REPLICAS: &str = "NoReplicas";
    /// A Model with the same name exists there and is not ours.
    pub const CONFLICT: &str = "Conflict";
    /// Applying the Model failed.
    pub const ERROR: &str = "Error";
    /// The member Model is Ready (the value counted in `readyClusters`).
    pub const READY: &str = "Ready";
}

/// Selection and shares of one FederatedModel.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Selected clusters (and names that do not exist).
    pub selection: Selection,
    /// Replicas per selected cluster (0 for those not Ready).
    pub shares: BTreeMap<String, u32>,
}

/// Selects clusters and splits the replicas (pure).
pub fn plan(fm: &FederatedModel, clusters: &[Cluster]) -> Result<Plan, InvalidSelector> {
    let views: Vec<ClusterView> = clusters.iter().map(ClusterView::of).collect();
    let selection = selection::select(&fm.spec.placement, &views)?;
    // Room counts only where the model does not run yet: replicas that
    // run (or wait) somewhere are not moved for capacity.
    let running: BTreeSet<&str> = fm
        .status
        .iter()
        .flat_map(|s| &s.clusters)
        .filter(|c| c.total_replicas.unwrap_or(0) > 0)
        .map(|c| c.cluster.as_str())
        .collect();
    let room = |name: &str| {
        if running.contains(name) {
            return None;
        }
        let cluster = clusters.iter().find(|c| c.name_any() == name)?;
        capacity::replica_room(&fm.spec.template, cluster.status.as_ref()?)
    };
    let candidates: Vec<Candidate> = selection
        .selected
        .iter()
        .map(|c| Candidate {
            name: c.name.clone(),
            weight: distribution::weight_of(fm.spec.routing.as_ref(), &c.name),
            ready: c.ready,
            room: room(&c.name),
        })
        .collect();
    let per_cluster = u32::try_from(fm.spec.placement.replicas_per_cluster).unwrap_or(1);
    let shares = distribution::distribute(per_cluster, &candidates);
    Ok(Plan { selection, shares })
}

/// The Model to apply in a member cluster (pure): the template as spec,
/// the FederatedModel's name and namespace, labels pointing back to it and
/// to `cluster`, the share in [`REPLICAS_ANNOTATION`], and the
/// FederatedModel's own `flexinfer.ai/` annotations (routing strategy,
/// serve paths, ...).
pub fn member_model(fm: &FederatedModel, cluster: &str, replicas: u32) -> Model {
    let ns = fm.namespace().unwrap_or_else(|| "default".into());
    let name = fm.name_any();
    let mut model = Model::new(&name, fm.spec.template.clone());
    model.metadata.namespace = Some(ns.clone());
    model.metadata.labels = Some(member_labels(&ns, &name, cluster));
    let mut annotations: BTreeMap<String, String> = fm
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(flexinfer_crds::labels::PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(REPLICAS_ANNOTATION.to_owned(), replicas.to_string());
    model.metadata.annotations = Some(annotations);
    model
}

/// `cluster=replicas` pairs, for messages.
fn describe_shares(shares: &BTreeMap<String, u32>) -> String {
    shares
        .iter()
        .map(|(c, n)| format!("{c}={n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the FederatedModel controller until `shutdown` completes. Besides
/// its own objects it reacts to Clusters whose phase, labels or spec
/// change (re-placing the FederatedModels of that namespace), and
/// re-reads member status every `resync`.
pub async fn run(
    fctx: Arc<FederationContext>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let controller = Controller::new(
        fctx.ctx.watched_api::<FederatedModel>(),
        watcher::Config::default(),
    );
    let store = controller.store();
    let seen: Arc<Mutex<HashMap<(String, String), String>>> = Arc::default();
    let controller = controller.watches(
        fctx.ctx.watched_api::<Cluster>(),
        watcher::Config::default(),
        move |c: Cluster| {
            let ns = c.namespace();
            let signature = format!(
                "{:?}|{:?}|{:?}|{}",
                c.status.as_ref().and_then(|s| s.phase),
                selection::cluster_labels(&c),
                c.metadata.generation,
                c.metadata.deletion_timestamp.is_some()
            );
            let key = (ns.clone().unwrap_or_default(), c.name_any());
            let changed = seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, signature.clone())
                != Some(signature);
            if !changed {
                return Vec::new();
            }
            store
                .state()
                .into_iter()
                .filter(|fm| fm.namespace() == ns)
                .map(|fm| ObjectRef::from_obj(&*fm))
                .collect::<Vec<_>>()
        },
    );
    drive(
        controller,
        reconcile,
        error_policy,
        fctx,
        shutdown,
        "federatedmodel",
    )
    .await;
}

/// Backoff after a failed reconcile.
pub fn error_policy(_fm: Arc<FederatedModel>, err: &Error, _ctx: Arc<FederationContext>) -> Action {
    tracing::warn!(error = %err, "federatedmodel reconcile failed");
    Action::requeue(RETRY)
}

/// Reconciles one FederatedModel.
pub async fn reconcile(
    fm: Arc<FederatedModel>,
    fctx: Arc<FederationContext>,
) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(fm, fctx.clone()).await;
    fctx.ctx
        .metrics
        .observe(CONTROLLER, start, &result, Error::reason);
    result
}

async fn reconcile_inner(
    fm: Arc<FederatedModel>,
    fctx: Arc<FederationContext>,
) -> Result<Action, Error> {
    let ns = fm.namespace().unwrap_or_else(|| "default".into());
    let api: Api<FederatedModel> = fctx.ctx.api(&ns);
    let Some(fresh) = api.get_opt(&fm.name_any()).await? else {
        return Ok(Action::await_change());
    };
    finalizer(&api, FINALIZER, Arc::new(fresh), |event| async move {
        match event {
            FinalizerEvent::Apply(fm) => apply(fm, &fctx).await,
            FinalizerEvent::Cleanup(fm) => cleanup(fm, &fctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(e.to_string()))
}

/// Result of placing the Model in one cluster.
enum Placed {
    /// Applied (or already up to date); the Model as stored there.
    Model(Box<Model>),
    /// A foreign Model holds the name.
    Conflict,
}

/// Applies the member Model in `cluster`, creating the namespace when the
/// member lacks it.
async fn place(
    fctx: &FederationContext,
    cluster: &Cluster,
    fm: &FederatedModel,
    share: u32,
) -> Result<Placed, String> {
    let ns = fm.namespace().unwrap_or_else(|| "default".into());
    let name = fm.name_any();
    let client = fctx
        .clients
        .client(&fctx.ctx.client, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let api: Api<Model> = Api::namespaced(client.clone(), &ns);
    let desired = member_model(fm, &cluster.name_any(), share);
    let value = with_digest(serde_json::to_value(&desired).map_err(|e| e.to_string())?);
    if let Some(existing) = api.get_opt(&name).await.map_err(|e| e.to_string())? {
        if !is_member_of(existing.metadata.labels.as_ref(), &ns, &name) {
            return Ok(Placed::Conflict);
        }
        let current = serde_json::to_value(&existing).map_err(|e| e.to_string())?;
        if up_to_date(&value, &current) {
            return Ok(Placed::Model(Box::new(existing)));
        }
    }
    let pp = PatchParams::apply(MANAGER).force();
    let applied = match api.patch(&name, &pp, &Patch::Apply(&value)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            // The namespace does not exist in the member yet.
            create_namespace(&client, &ns).await?;
            api.patch(&name, &pp, &Patch::Apply(&value)).await
        }
        other => other,
    };
    applied
        .map(|m| Placed::Model(Box::new(m)))
        .map_err(|e| e.to_string())
}

async fn create_namespace(client: &kube::Client, ns: &str) -> Result<(), String> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut object = Namespace::default();
    object.metadata.name = Some(ns.to_owned());
    object.metadata.labels = Some(BTreeMap::from([(
        flexinfer_crds::labels::APP_MANAGED_BY.to_owned(),
        flexinfer_crds::labels::MANAGED_BY_FLEXINFER.to_owned(),
    )]));
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(format!("cannot create namespace {ns}: {e}")),
    }
}

/// Deletes this FederatedModel's Models in `cluster`: all of them, or
/// (with `placed_through`) those placed through that Cluster object.
/// Returns how many were deleted.
async fn sweep(
    fctx: &FederationContext,
    cluster: &Cluster,
    fm: &FederatedModel,
    placed_through: Option<&str>,
) -> Result<usize, String> {
    let ns = fm.namespace().unwrap_or_else(|| "default".into());
    let client = fctx
        .clients
        .client(&fctx.ctx.client, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let api: Api<Model> = Api::namespaced(client, &ns);
    let lp = ListParams::default().labels(&member_selector(&ns, &fm.name_any()));
    let models = match api.list(&lp).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e.to_string()),
    };
    let mut deleted = 0;
    for model in models {
        let through = model.labels().get(FEDERATION_CLUSTER).map(String::as_str);
        if placed_through.is_some_and(|c| through != Some(c)) {
            continue;
        }
        match api
            .delete(&model.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(deleted)
}

async fn apply(fm: Arc<FederatedModel>, fctx: &FederationContext) -> Result<Action, Error> {
    let ctx = &fctx.ctx;
    let now = ctx.now();
    let ns = fm.namespace().unwrap_or_else(|| "default".into());
    let api: Api<FederatedModel> = ctx.api(&ns);
    let prev = fm.status.clone().unwrap_or_default();
    let mut conds = Conditions::new(&prev.conditions, now, fm.meta().generation);

    let clusters: Vec<Cluster> = ctx
        .api::<Cluster>(&ns)
        .list(&ListParams::default())
        .await?
        .items;
    let planned = fm
        .spec
        .validate_basic()
        .map_err(|e| e.to_string())
        .and_then(|()| plan(&fm, &clusters).map_err(|e| e.to_string()));
    let plan = match planned {
        Ok(p) => p,
        Err(message) => {
            conds.set(
                condition::CONFIG_VALID,
                false,
                "ValidationFailed",
                message.clone(),
            );
            let status = FederatedModelStatus {
                conditions: conds.into_vec(),
                ..prev.clone()
            };
            if write_status(&api, &fm, &status).await? && prev.conditions != status.conditions {
                ctx.events
                    .warning(&fm.object_ref(&()), "ValidationFailed", message)
                    .await;
            }
            return Ok(Action::await_change());
        }
    };
    conds.set(
        condition::CONFIG_VALID,
        true,
        "ConfigValid",
        "placement and routing are valid",
    );

    let Placements {
        mut entries,
        mut failures,
        placed_on,
    } = place_selected(fctx, &fm, &plan, &clusters).await;
    sweep_unplaced(fctx, &fm, &clusters, &placed_on, &mut failures).await;
    entries.sort_by(|a, b| a.cluster.cmp(&b.cluster));

    let shares: BTreeMap<String, u32> = plan
        .shares
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| (c.clone(), *n))
        .collect();
    let (ready, total) = placement_conditions(&mut conds, &entries, &plan, &failures, &shares);
    let status = FederatedModelStatus {
        clusters: entries,
        ready_clusters: Some(i32::try_from(ready).unwrap_or(i32::MAX)),
        total_clusters: Some(i32::try_from(total).unwrap_or(i32::MAX)),
        conditions: conds.into_vec(),
    };
    write_status(&api, &fm, &status).await?;

    announce_shares(ctx, &fm, &prev, &shares).await;
    if failures.is_empty() {
        Ok(Action::requeue(fctx.settings.resync))
    } else {
        Ok(Action::requeue(RETRY.min(fctx.settings.resync)))
    }
}

/// What placing a FederatedModel on its selected clusters gave.
struct Placements {
    /// One status entry per selected or missing cluster.
    entries: Vec<FederatedModelClusterStatus>,
    /// What went wrong, per cluster.
    failures: Vec<String>,
    /// Clusters that now hold the member Model.
    placed_on: BTreeSet<String>,
}

/// Places the member Model with its replica share on every selected,
/// Ready cluster, and lists the missing ones.
async fn place_selected(
    fctx: &FederationContext,
    fm: &FederatedModel,
    plan: &Plan,
    clusters: &[Cluster],
) -> Placements {
    let by_name: BTreeMap<String, &Cluster> = clusters.iter().map(|c| (c.name_any(), c)).collect();
    let mut entries = Vec::new();
    let mut failures = Vec::new();
    let mut placed_on = BTreeSet::new();
    for view in &plan.selection.selected {
        let share = plan.shares.get(&view.name).copied().unwrap_or(0);
        let mut entry = FederatedModelClusterStatus {
            cluster: view.name.clone(),
            total_replicas: Some(i32::try_from(share).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        let Some(cluster) = by_name.get(&view.name).filter(|_| view.ready) else {
            entry.phase = Some(phase::CLUSTER_NOT_READY.into());
            entries.push(entry);
            continue;
        };
        if share == 0 {
            entry.phase = Some(phase::NO_REPLICAS.into());
            entries.push(entry);
            continue;
        }
        match place(fctx, cluster, fm, share).await {
            Ok(Placed::Model(model)) => {
                placed_on.insert(view.name.clone());
                entry.phase = Some(
                    model
                        .phase()
                        .map_or_else(|| phase::PENDING.to_owned(), |p| p.to_string()),
                );
                entry.ready_replicas = model.status.as_ref().and_then(|s| s.ready_replicas);
            }
            Ok(Placed::Conflict) => {
                entry.phase = Some(phase::CONFLICT.into());
                failures.push(format!(
                    "{}: a Model {} exists there and is not managed by this FederatedModel",
                    view.name,
                    fm.name_any()
                ));
            }
            Err(e) => {
                entry.phase = Some(phase::ERROR.into());
                failures.push(format!("{}: {e}", view.name));
            }
        }
        entries.push(entry);
    }
    for missing in &plan.selection.missing {
        entries.push(FederatedModelClusterStatus {
            cluster: missing.clone(),
            phase: Some(phase::CLUSTER_NOT_FOUND.into()),
            total_replicas: Some(0),
            ..Default::default()
        });
    }
    Placements {
        entries,
        failures,
        placed_on,
    }
}

/// Ready clusters that should not run the model (unselected, share 0)
/// lose the Models placed through them.
async fn sweep_unplaced(
    fctx: &FederationContext,
    fm: &FederatedModel,
    clusters: &[Cluster],
    placed_on: &BTreeSet<String>,
    failures: &mut Vec<String>,
) {
    for cluster in clusters.iter().filter(|c| ClusterView::of(c).ready) {
        let name = cluster.name_any();
        if placed_on.contains(&name) {
            continue;
        }
        if let Err(e) = sweep(fctx, cluster, fm, Some(&name)).await {
            failures.push(format!("{name}: removing the Model failed: {e}"));
        }
    }
}

/// The Placed and Ready conditions of the placement; returns the Ready
/// and total cluster counts.
fn placement_conditions(
    conds: &mut Conditions,
    entries: &[FederatedModelClusterStatus],
    plan: &Plan,
    failures: &[String],
    shares: &BTreeMap<String, u32>,
) -> (usize, usize) {
    let ready = entries
        .iter()
        .filter(|e| e.phase.as_deref() == Some(phase::READY))
        .count();
    let total = entries.len();
    let any_ready_selected = plan.selection.selected.iter().any(|c| c.ready);
    if total == 0 {
        conds.set(
            condition::PLACED,
            false,
            "NoClustersSelected",
            "no Cluster matches spec.placement",
        );
    } else if !any_ready_selected {
        conds.set(
            condition::PLACED,
            false,
            "NoReadyClusters",
            format!("none of the {total} selected clusters is Ready"),
        );
    } else if !failures.is_empty() {
        conds.set(
            condition::PLACED,
            false,
            "PlacementFailed",
            failures.join("; "),
        );
    } else {
        conds.set(
            condition::PLACED,
            true,
            "Placed",
            format!("replicas per cluster: {}", describe_shares(shares)),
        );
    }
    conds.set(
        condition::READY,
        ready > 0,
        if ready > 0 {
            "ClustersReady"
        } else {
            "NoClusterReady"
        },
        format!("{ready}/{total} clusters ready"),
    );
    (ready, total)
}

/// A `Placed` event for a first placement, `Rebalanced` when the replica
/// shares changed.
async fn announce_shares(
    ctx: &Context,
    fm: &FederatedModel,
    prev: &FederatedModelStatus,
    shares: &BTreeMap<String, u32>,
) {
    let old: BTreeMap<String, u32> = prev
        .clusters
        .iter()
        .filter_map(|e| {
            let n = u32::try_from(e.total_replicas.unwrap_or(0)).unwrap_or(0);
            (n > 0).then(|| (e.cluster.clone(), n))
        })
        .collect();
    if &old != shares {
        let obj = fm.object_ref(&());
        if old.is_empty() {
            ctx.events
                .normal(
                    &obj,
                    "Placed",
                    format!("replicas per cluster: {}", describe_shares(shares)),
                )
                .await;
        } else {
            ctx.events
                .normal(
                    &obj,
                    "Rebalanced",
                    format!(
                        "replicas per cluster: {} (was {})",
                        describe_shares(shares),
                        describe_shares(&old)
                    ),
                )
                .await;
        }
    }
}

/// Deletes the member Models from every Ready cluster; an error on one of
/// them fails the cleanup (retried), a cluster that is not Ready is skipped
/// and named in a Warning event.
async fn cleanup(fm: Arc<FederatedModel>, fctx: &FederationContext) -> Result<Action, Error> {
    let ctx = &fctx.ctx;
    let ns = fm.namespace().unwrap_or_else(|| "default".into());
    let clusters = ctx
        .api::<Cluster>(&ns)
        .list(&ListParams::default())
        .await?
        .items;
    let mut skipped = Vec::new();
    let mut deleted = 0;
    for cluster in &clusters {
        if !ClusterView::of(cluster).ready {
            let placed = fm.status.as_ref().is_some_and(|s| {
                s.clusters
                    .iter()
                    .any(|e| e.cluster == cluster.name_any() && e.total_replicas.unwrap_or(0) > 0)
            });
            if placed {
                skipped.push(cluster.name_any());
            }
            continue;
        }
        deleted += sweep(fctx, cluster, &fm, None).await.map_err(|e| {
            Error::Invalid(format!(
                "removing Model {} from cluster {}: {e}",
                fm.name_any(),
                cluster.name_any()
            ))
        })?;
    }
    let obj = fm.object_ref(&());
    if !skipped.is_empty() {
        ctx.events
            .warning(
                &obj,
                "CleanupIncomplete",
                format!(
                    "clusters not Ready keep their Model {}: {}",
                    fm.name_any(),
                    skipped.join(", ")
                ),
            )
            .await;
    }
    ctx.events
        .normal(&obj, "Deleted", format!("deleted {deleted} member Models"))
        .await;
    Ok(Action::await_change())
}

/// Writes `status` with server-side apply unless it equals the stored one.
async fn write_status(
    api: &Api<FederatedModel>,
    fm: &FederatedModel,
    status: &FederatedModelStatus,
) -> Result<bool, Error> {
    let mut current = fm.status.clone().unwrap_or_default();
    sort_conditions(&mut current.conditions);
    apply_status(api, STATUS_MANAGER, fm, &current, status).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexinfer_crds::v1alpha2::{
        ClusterPhase, ClusterSpec, ClusterStatus, FederatedModelPlacement, FederatedModelRouting,
        FederatedModelSpec, ModelSpec,
    };

    fn cluster(name: &str, phase: Option<ClusterPhase>) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                api_endpoint: format!("https://{name}.example.com"),
                secret_ref: Default::default(),
                labels: BTreeMap::from([("region".to_owned(), name.to_owned())]),
                probe_interval: Duration::from_secs(30).into(),
            },
        );
        c.status = phase.map(|p| ClusterStatus {
            phase: Some(p),
            ..Default::default()
        });
        c
    }

    fn federated(weights: &[(&str, i32)]) -> FederatedModel {
        let mut fm = FederatedModel::new(
            "llama",
            FederatedModelSpec {
                template: ModelSpec {
                    backend: "llamacpp".into(),
                    source: "file:///m.gguf".into(),
                    ..Default::default()
                },
                placement: FederatedModelPlacement {
                    clusters: vec!["a".into(), "b".into(), "c".into()],
                    ..Default::default()
                },
                routing: Some(FederatedModelRouting {
                    weights: weights.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
                    ..Default::default()
                }),
            },
        );
        fm.metadata.namespace = Some("team".into());
        fm
    }

    #[test]
    fn plan_splits_over_ready_selected_clusters() {
        let fm = federated(&[("a", 2), ("b", 1)]);
        let clusters = [
            cluster("a", Some(ClusterPhase::Ready)),
            cluster("b", Some(ClusterPhase::Ready)),
            cluster("d", Some(ClusterPhase::Ready)),
        ];
        let p = plan(&fm, &clusters).unwrap();
        assert_eq!(p.selection.missing, ["c"]);
        assert_eq!(
            p.shares,
            BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)])
        );
        let degraded = [
            cluster("a", Some(ClusterPhase::Ready)),
            cluster("b", Some(ClusterPhase::NotReady)),
        ];
        let p = plan(&fm, &degraded).unwrap();
        assert_eq!(
            p.shares,
            BTreeMap::from([("a".to_owned(), 3), ("b".to_owned(), 0)])
        );
        let unprobed = [
            cluster("a", None),
            cluster("b", Some(ClusterPhase::Unknown)),
        ];
        assert!(plan(&fm, &unprobed)
            .unwrap()
            .shares
            .values()
            .all(|&n| n == 0));
    }

    #[test]
    fn new_replicas_go_where_there_are_free_gpus() {
        use flexinfer_crds::v1alpha2::{
            FederatedModelClusterStatus, FederatedModelStatus, GpuSpec, GpuVendor,
        };
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

        let mut fm = federated(&[]);
        fm.spec.placement.replicas_per_cluster = 2;
        fm.spec.template.gpu = Some(GpuSpec {
            vendor: GpuVendor::Nvidia,
            count: Some(2),
            ..Default::default()
        });
        let probed = |name: &str, free_gpus: &str| {
            let mut c = cluster(name, Some(ClusterPhase::Ready));
            if let Some(status) = c.status.as_mut() {
                status.capacity =
                    BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity("8".into()))]);
                status.available =
                    BTreeMap::from([("nvidia.com/gpu".to_owned(), Quantity(free_gpus.into()))]);
            }
            c
        };
        // `a` has 2 free GPUs: room for one 2-GPU replica of its 2; `b`
        // has room for 3; `c` was never probed (unknown room).
        let clusters = [
            probed("a", "2"),
            probed("b", "6"),
            cluster("c", Some(ClusterPhase::Ready)),
        ];
        let p = plan(&fm, &clusters).unwrap();
        assert_eq!(
            p.shares,
            BTreeMap::from([
                ("a".to_owned(), 1),
                ("b".to_owned(), 3),
                ("c".to_owned(), 2)
            ])
        );
        // Where the model already runs, its replicas are not moved for
        // capacity (its own pods use the GPUs that look taken).
        fm.status = Some(FederatedModelStatus {
            clusters: vec![FederatedModelClusterStatus {
                cluster: "a".into(),
                total_replicas: Some(2),
                ..Default::default()
            }],
            ..Default::default()
        });
        let p = plan(&fm, &clusters).unwrap();
        assert_eq!(
            p.shares,
            BTreeMap::from([
                ("a".to_owned(), 2),
                ("b".to_owned(), 2),
                ("c".to_owned(), 2)
            ])
        );
    }

    #[test]
    fn member_model_carries_the_template_labels_and_share() {
        let mut fm = federated(&[]);
        fm.metadata.annotations = Some(BTreeMap::from([
            ("flexinfer.ai/routing".to_owned(), "least-loaded".to_owned()),
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                "{}".to_owned(),
            ),
        ]));
        let m = member_model(&fm, "east", 2);
        assert_eq!(m.name_any(), "llama");
        assert_eq!(m.namespace().as_deref(), Some("team"));
        assert_eq!(m.spec, fm.spec.template);
        assert!(is_member_of(m.metadata.labels.as_ref(), "team", "llama"));
        assert_eq!(m.labels()[FEDERATION_CLUSTER], "east");
        assert_eq!(
            m.annotations(),
            &BTreeMap::from([
                ("flexinfer.ai/replicas".to_owned(), "2".to_owned()),
                ("flexinfer.ai/routing".to_owned(), "least-loaded".to_owned()),
            ])
        );
        assert_eq!(
            crate::federation::annotated_replicas(m.metadata.annotations.as_ref()),
            Some(2)
        );
    }
}
