//! Background tasks turning lifecycle commands into API calls: activation
//! (single-flight, then waiting for readiness from the watch), GPUGroup
//! demand annotations and throttled activity touches.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flexinfer_operator::lifecycle::Phase;
use kube::Client;
use tokio::sync::{mpsc, watch};

use super::backoff::ActivationBackoff;
use super::lifecycle::{Command, KubeLifecycle};
use super::models::{Target, TargetKind};
use super::patch;
use crate::activation::ModelLifecycle;

/// How long a model reported as Failed may take to leave that phase after
/// an activation before the waiting requests are failed.
pub const FAILED_GRACE: Duration = Duration::from_secs(5);

/// Handles commands until the channel closes.
pub async fn run(
    client: Client,
    lifecycle: Arc<KubeLifecycle>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    activation_wait: Duration,
    backoff: Option<ActivationBackoff>,
) {
    let mut demand: HashMap<String, watch::Sender<u32>> = HashMap::new();
    while let Some(command) = commands.recv().await {
        match command {
            Command::Activate(model) => {
                tokio::spawn(activate(
                    client.clone(),
                    lifecycle.clone(),
                    model,
                    activation_wait,
                    backoff.clone(),
                ));
            }
            Command::Touch(model) => {
                let Some((target, _)) = lifecycle.target(&model) else {
                    continue;
                };
                let client = client.clone();
                tokio::spawn(async move {
                    if let Err(e) = patch::last_active(&client, &target).await {
                        tracing::warn!(model, error = %e, "could not record model activity");
                    }
                });
            }
            Command::Demand(model, depth) => {
                let tx = demand.entry(model.clone()).or_insert_with(|| {
                    let (tx, rx) = watch::channel(depth);
                    tokio::spawn(write_demand(
                        client.clone(),
                        lifecycle.clone(),
                        model.clone(),
                        rx,
                    ));
                    tx
                });
                tx.send_replace(depth);
            }
        }
    }
}

/// Scales `model` up once, then holds the single-flight slot until the
/// watch reports it ready or failed, or `wait` passes.
async fn activate(
    client: Client,
    lifecycle: Arc<KubeLifecycle>,
    model: String,
    wait: Duration,
    backoff: Option<ActivationBackoff>,
) {
    let Some((target, cold_start)) = lifecycle.target(&model) else {
        lifecycle.finish_activation(&model);
        return;
    };
    let Some(mut status) = lifecycle.status(&model) else {
        lifecycle.finish_activation(&model);
        return;
    };
    status.borrow_and_update();
    tracing::info!(model, namespace = %target.namespace, kind = target.kind.as_str(), "activating model");
    let mut result = scale_up(&client, &target).await;
    let mut attempt = 0;
    while let (Err(e), Some(b)) = (&result, &backoff) {
        if attempt >= b.retries {
            break;
        }
        let pause = b.wait(attempt, ActivationBackoff::jitter());
        tracing::warn!(model, error = %e, retry = attempt + 1, of = b.retries,
            wait_ms = crate::logging::millis(pause), "scale-up failed; retrying");
        b.record(&model, pause);
        tokio::time::sleep(pause).await;
        attempt += 1;
        result = scale_up(&client, &target).await;
    }
    if let Err(e) = result {
        tracing::warn!(model, error = %e, "scale-up failed");
        lifecycle.fail(&model, format!("scale-up failed: {e}"));
        lifecycle.finish_activation(&model);
        return;
    }
    // A model the cluster reports as Failed gets a moment to be retried
    // after the activity signal; if it stays Failed, the waiting requests
    // get its message rather than waiting out the whole timeout.
    if status.borrow().phase == Phase::Failed {
        let wait = status.wait_for(|s| s.phase != Phase::Failed);
        let retried = matches!(tokio::time::timeout(FAILED_GRACE, wait).await, Ok(Ok(_)));
        if !retried {
            let message = status.borrow().message.clone();
            lifecycle.fail(
                &model,
                format!(
                    "model \"{}\" is Failed: {}",
                    target.name,
                    message.as_deref().unwrap_or("no message")
                ),
            );
            lifecycle.finish_activation(&model);
            return;
        }
    }
    let settled = async {
        loop {
            if matches!(status.borrow().phase, Phase::Ready) {
                return;
            }
            if status.changed().await.is_err() {
                return;
            }
            if matches!(status.borrow().phase, Phase::Failed) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(wait.max(cold_start), settled).await;
    lifecycle.finish_activation(&model);
}

/// The activity signal that scales a model up: its activity time, and for
/// a v1alpha1 ModelDeployment at zero outside a GPU group, one replica.
async fn scale_up(client: &Client, target: &Target) -> Result<(), kube::Error> {
    patch::last_active(client, target).await?;
    if target.kind == TargetKind::ModelDeployment
        && target.replicas == 0
        && target.gpu_group.is_none()
    {
        patch::scale_up(client, target).await?;
    }
    Ok(())
}

/// Keeps the GPUGroup demand annotations of `model` at the latest depth,
/// clearing them when the queue drains.
async fn write_demand(
    client: Client,
    lifecycle: Arc<KubeLifecycle>,
    model: String,
    mut depth: watch::Receiver<u32>,
) {
    let mut since: Option<String> = None;
    let mut written: Option<u32> = None;
    loop {
        let now = *depth.borrow_and_update();
        if written != Some(now) {
            if let Some((target, _)) = lifecycle.target(&model) {
                if let Some(group) = &target.gpu_group {
                    let value = if now > 0 {
                        let s = since.get_or_insert_with(patch::now_rfc3339).clone();
                        Some((now, s))
                    } else {
                        since = None;
                        None
                    };
                    let r = patch::demand(
                        &client,
                        &target.namespace,
                        group,
                        &target.name,
                        value.as_ref().map(|(d, s)| (*d, s.as_str())),
                    )
                    .await;
                    match r {
                        Ok(()) => written = Some(now),
                        Err(e) => {
                            tracing::warn!(model, group, error = %e, "could not write demand annotations")
                        }
                    }
                }
            }
        }
        if depth.changed().await.is_err() {
            return;
        }
    }
}
