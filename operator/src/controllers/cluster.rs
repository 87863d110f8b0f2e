//! The v1alpha2 `Cluster` controller: probes each registered member
//! cluster every `spec.probeInterval` and reports its health, capacity and
//! Models in the status.
//!
//! A probe, through a client built from the kubeconfig Secret
//! ([`super::member_clients`]), reads `/version`, lists Nodes and unfinished
//! Pods (capacity and free capacity, [`crate::federation::capacity`]) and
//! lists Models. Success makes the cluster `Ready`; after
//! [`super::federation::FederationSettings::failure_threshold`] consecutive
//! failures it turns `NotReady` (until then it keeps its phase and the
//! `Ready` condition says `ProbeFailing`). A Secret or kubeconfig that
//! cannot be used, or an invalid spec, makes it `Unknown`. A failed probe
//! keeps the last known capacity and Models. A hub API error (reading the
//! Secret) fails the reconcile and changes nothing.
//!
//! Status writes trigger the controller again; [`ProbeBook`] keeps those
//! reconciles from probing before the interval is up (unless the spec
//! changed).

use super::drive::drive;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flexinfer_crds::v1alpha2::{Cluster, ClusterModelStatus, ClusterPhase, ClusterStatus, Model};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::{watcher, Controller};
use kube::{Client, Resource, ResourceExt};

use super::apply::apply_status;
use super::conditions::{sort_conditions, to_time, Conditions};
use super::federation::FederationContext;
use super::member_clients::MemberError;
use super::Error;
use crate::federation::{capacity, STATUS_MANAGER};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "cluster";
/// Condition type of a cluster's health.
pub const READY: &str = "Ready";
/// Shortest probe interval honoured, whatever the spec says.
pub const MIN_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Reasons of the `Ready` condition.
pub mod reason {
    /// The last probe succeeded.
    pub const PROBE_SUCCEEDED: &str = "ProbeSucceeded";
    /// Probes failed `failureThreshold` times in a row.
    pub const PROBE_FAILED: &str = "ProbeFailed";
    /// The last probe failed, fewer times in a row than the threshold.
    pub const PROBE_FAILING: &str = "ProbeFailing";
    /// The spec fails validation.
    pub const INVALID_SPEC: &str = "InvalidSpec";
}

/// Outcome of one attempt, for [`ProbeBook::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The member answered.
    Succeeded,
    /// The member did not answer (or answered with an error).
    Failed,
    /// No probe could be made (spec or Secret problem).
    NotProbed,
}

#[derive(Debug, Clone)]
struct ProbeRecord {
    at: Instant,
    generation: Option<i64>,
    failures: u32,
}

/// When each cluster was last probed and how many probes failed in a row.
#[derive(Debug, Default)]
pub struct ProbeBook {
    records: Mutex<HashMap<(String, String), ProbeRecord>>,
}

impl ProbeBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ProbeRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long to wait before the next probe of `key`; `None` when one is
    /// due now (never probed, interval elapsed, or spec generation changed).
    pub fn wait(
        &self,
        key: &(String, String),
        generation: Option<i64>,
        interval: Duration,
    ) -> Option<Duration> {
        let records = self.lock();
        let rec = records.get(key)?;
        if rec.generation != generation {
            return None;
        }
        interval
            .checked_sub(rec.at.elapsed())
            .filter(|w| !w.is_zero())
    }

    /// Records an attempt and returns the failures in a row.
    pub fn record(&self, key: &(String, String), generation: Option<i64>, attempt: Attempt) -> u32 {
        let mut records = self.lock();
        let failures = records.get(key).map_or(0, |r| r.failures);
        let failures = match attempt {
            Attempt::Succeeded => 0,
            Attempt::Failed => failures.saturating_add(1),
            Attempt::NotProbed => failures,
        };
        records.insert(
            key.clone(),
            ProbeRecord {
                at: Instant::now(),
                generation,
                failures,
            },
        );
        failures
    }

    /// Forgets `key` (the Cluster is gone).
    pub fn forget(&self, key: &(String, String)) {
        self.lock().remove(key);
    }
}

/// Phase after a probe (pure): success is `Ready`; `failures` in a row at
/// or above `threshold` (at least 1) is `NotReady`; fewer keep the
/// previous phase (`Pending` before the first success).
pub fn next_phase(
    previous: Option<ClusterPhase>,
    succeeded: bool,
    failures: u32,
    threshold: u32,
) -> ClusterPhase {
    if succeeded {
        ClusterPhase::Ready
    } else if failures >= threshold.max(1) {
        ClusterPhase::NotReady
    } else {
        match previous {
            None | Some(ClusterPhase::Unknown) => ClusterPhase::Pending,
            Some(p) => p,
        }
    }
}

/// What a successful probe saw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProbeReport {
    /// `gitVersion` of the member's API server.
    pub version: String,
    /// Nodes listed.
    pub nodes: usize,
    /// Capacity of schedulable Nodes.
    pub capacity: capacity::Amounts,
    /// Capacity not requested by running Pods.
    pub available: capacity::Amounts,
    /// Models in the member (sorted by namespace, name).
    pub models: Vec<ClusterModelStatus>,
    /// Set when Models could not be listed (CRD not installed there).
    pub models_note: Option<String>,
}

impl ProbeReport {
    /// One-line summary for `status.message`.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "Kubernetes {}; {} nodes, {} models",
            self.version,
            self.nodes,
            self.models.len()
        );
        if let Some(note) = &self.models_note {
            s.push_str("; ");
            s.push_str(note);
        }
        s
    }
}

/// Probes a member: version, Nodes, unfinished Pods, Models.
pub async fn probe(client: &Client) -> Result<ProbeReport, kube::Error> {
    let version = client.apiserver_version().await?.git_version;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"))
        .await?
        .items;
    let (models, models_note) = match Api::<Model>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let mut models: Vec<ClusterModelStatus> = list
                .items
                .iter()
                .map(|m| ClusterModelStatus {
                    name: m.name_any(),
                    namespace: m.namespace().unwrap_or_default(),
                    phase: m.phase().map(|p| p.to_string()),
                })
                .collect();
            models.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            (models, None)
        }
        Err(kube::Error::Api(s)) if s.code == 404 => (
            Vec::new(),
            Some("the Model CRD is not installed there".to_owned()),
        ),
        Err(e) => return Err(e),
    };
    Ok(ProbeReport {
        version,
        nodes: nodes.len(),
        capacity: capacity::node_capacity(&nodes),
        available: capacity::available(&nodes, &pods),
        models,
        models_note,
    })
}

/// Runs the Cluster controller until `shutdown` completes.
pub async fn run(
    fctx: Arc<FederationContext>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let controller = Controller::new(
        fctx.ctx.watched_api::<Cluster>(),
        watcher::Config::default(),
    );
    drive(
        controller,
        reconcile,
        error_policy,
        fctx,
        shutdown,
        "cluster",
    )
    .await;
}

/// Backoff after a failed reconcile (a hub API error).
pub fn error_policy(_c: Arc<Cluster>, err: &Error, _ctx: Arc<FederationContext>) -> Action {
    tracing::warn!(error = %err, "cluster reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Reconciles one Cluster: probes it when a probe is due and writes the
/// status.
pub async fn reconcile(
    cluster: Arc<Cluster>,
    fctx: Arc<FederationContext>,
) -> Result<Action, Error> {
    let start = Instant::now();
    let result = reconcile_inner(cluster, &fctx).await;
    fctx.ctx
        .metrics
        .observe(CONTROLLER, start, &result, Error::reason);
    result
}

async fn reconcile_inner(cluster: Arc<Cluster>, fctx: &FederationContext) -> Result<Action, Error> {
    let ctx = &fctx.ctx;
    let ns = cluster.namespace().unwrap_or_else(|| "default".into());
    let name = cluster.name_any();
    let key = (ns.clone(), name.clone());
    let api: Api<Cluster> = ctx.api(&ns);
    let fresh = match api.get_opt(&name).await? {
        Some(c) if c.metadata.deletion_timestamp.is_none() => c,
        _ => {
            fctx.clients.forget(&ns, &name);
            fctx.probes.forget(&key);
            return Ok(Action::await_change());
        }
    };
    let generation = fresh.metadata.generation;
    let interval = fresh.spec.probe_interval().max(MIN_PROBE_INTERVAL);
    if let Some(wait) = fctx.probes.wait(&key, generation, interval) {
        return Ok(Action::requeue(wait));
    }

    let now = ctx.now();
    let prev = fresh.status.clone().unwrap_or_default();
    let mut conds = Conditions::new(&prev.conditions, now, generation);
    let mut status = ClusterStatus {
        capacity: prev.capacity.clone(),
        available: prev.available.clone(),
        models: prev.models.clone(),
        last_probe_time: Some(to_time(now)),
        ..Default::default()
    };
    let phase = if let Err(e) = fresh.spec.validate_basic() {
        fctx.probes.record(&key, generation, Attempt::NotProbed);
        fctx.clients.forget(&ns, &name);
        conds.set(READY, false, reason::INVALID_SPEC, e.to_string());
        status.message = Some(e.to_string());
        ClusterPhase::Unknown
    } else {
        match fctx.clients.refresh(&ctx.client, &fresh).await {
            // The hub itself did not answer: retry, without judging the
            // member (no failover because of a hub hiccup).
            Err(MemberError::Hub(e)) => return Err(e.into()),
            Err(e) => {
                fctx.probes.record(&key, generation, Attempt::NotProbed);
                conds.set(READY, false, e.reason(), e.to_string());
                status.message = Some(e.to_string());
                ClusterPhase::Unknown
            }
            Ok((client, _)) => {
                let outcome = tokio::time::timeout(fctx.settings.probe_timeout, probe(&client))
                    .await
                    .map_err(|_| {
                        format!(
                            "probe timed out after {}s",
                            fctx.settings.probe_timeout.as_secs_f64()
                        )
                    })
                    .and_then(|r| r.map_err(|e| e.to_string()));
                let attempt = if outcome.is_ok() {
                    Attempt::Succeeded
                } else {
                    Attempt::Failed
                };
                let failures = fctx.probes.record(&key, generation, attempt);
                let threshold = fctx.settings.failure_threshold.max(1);
                let phase = next_phase(prev.phase, outcome.is_ok(), failures, threshold);
                match outcome {
                    Ok(report) => {
                        conds.set(READY, true, reason::PROBE_SUCCEEDED, report.summary());
                        status.message = Some(report.summary());
                        status.capacity = capacity::to_quantities(&report.capacity);
                        status.available = capacity::to_quantities(&report.available);
                        status.models = report.models;
                    }
                    Err(message) => {
                        let message =
                            format!("probe failed ({failures} of {threshold} in a row): {message}");
                        if phase == ClusterPhase::NotReady {
                            conds.set(READY, false, reason::PROBE_FAILED, message.clone());
                        } else {
                            let up = phase == ClusterPhase::Ready;
                            conds.set(READY, up, reason::PROBE_FAILING, message.clone());
                        }
                        status.message = Some(message);
                    }
                }
                phase
            }
        }
    };
    status.phase = Some(phase);
    status.conditions = conds.into_vec();
    write_status(&api, &fresh, &status).await?;
    if prev.phase != Some(phase) {
        let obj = fresh.object_ref(&());
        let note = status.message.clone().unwrap_or_default();
        match phase {
            ClusterPhase::Ready => ctx.events.normal(&obj, "ClusterReady", note).await,
            ClusterPhase::Pending => {}
            other => {
                ctx.events
                    .warning(&obj, &format!("Cluster{other:?}"), note)
                    .await
            }
        }
    }
    Ok(Action::requeue(interval))
}

/// Writes `status` with server-side apply unless it equals the stored one.
async fn write_status(
    api: &Api<Cluster>,
    cluster: &Cluster,
    status: &ClusterStatus,
) -> Result<bool, Error> {
    let mut current = cluster.status.clone().unwrap_or_default();
    sort_conditions(&mut current.conditions);
    apply_status(api, STATUS_MANAGER, cluster, &current, status).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterPhase::*;

    #[test]
    fn phase_follows_probes_and_the_failure_threshold() {
        assert_eq!(next_phase(None, true, 0, 1), Ready);
        assert_eq!(next_phase(Some(NotReady), true, 0, 1), Ready);
        assert_eq!(next_phase(Some(Ready), false, 1, 1), NotReady);
        // Threshold 0 behaves as 1.
        assert_eq!(next_phase(Some(Ready), false, 1, 0), NotReady);
        // Below the threshold the phase holds.
        assert_eq!(next_phase(Some(Ready), false, 1, 3), Ready);
        assert_eq!(next_phase(Some(Ready), false, 2, 3), Ready);
        assert_eq!(next_phase(Some(Ready), false, 3, 3), NotReady);
        assert_eq!(next_phase(None, false, 1, 3), Pending);
        assert_eq!(next_phase(Some(Unknown), false, 1, 3), Pending);
    }

    #[test]
    fn probe_book_waits_for_the_interval_unless_the_spec_changed() {
        let book = ProbeBook::default();
        let key = ("ns".to_owned(), "east".to_owned());
        let hour = Duration::from_secs(3600);
        assert_eq!(book.wait(&key, Some(1), hour), None);
        assert_eq!(book.record(&key, Some(1), Attempt::Failed), 1);
        assert!(book.wait(&key, Some(1), hour).is_some());
        assert_eq!(book.wait(&key, Some(2), hour), None);
        assert_eq!(book.wait(&key, Some(1), Duration::ZERO), None);
        assert_eq!(book.record(&key, Some(1), Attempt::Failed), 2);
        assert_eq!(book.record(&key, Some(1), Attempt::NotProbed), 2);
        assert_eq!(book.record(&key, Some(1), Attempt::Succeeded), 0);
        book.forget(&key);
        assert_eq!(book.wait(&key, Some(1), hour), None);
    }
}
