//! Running one kube-runtime controller until shutdown.
//!
//! A graceful shutdown of a kube-runtime `Controller` lets the reconciles in
//! flight finish. Its runner, though, holds all work until the primary
//! store has completed its first list, and cannot end before that: a
//! shutdown that arrives before the first list (a process stopped right
//! after start-up, or an API server too slow to answer the list) would
//! never complete. [`drive`] therefore starts the graceful shutdown once
//! the store is ready (or [`STORE_READY_WAIT`] after the signal), and drops
//! the controller — cancelling what is still running — if it has not
//! stopped [`SHUTDOWN_GRACE`] after the signal.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryFuture};
use kube::runtime::controller::{Action, Controller};
use kube::Resource;
use serde::de::DeserializeOwned;

/// How long a graceful shutdown waits for the primary store's first list.
pub const STORE_READY_WAIT: Duration = Duration::from_secs(5);

/// How long after the shutdown signal a controller may keep running.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// The error policy of most controllers: log the failure, try again after
/// `delay`.
pub fn retry_after<K, E: std::fmt::Display, Ctx>(
    kind: &'static str,
    delay: Duration,
) -> impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action {
    move |_, err, _| {
        tracing::warn!(kind, error = %err, "reconcile failed");
        Action::requeue(delay)
    }
}

/// Runs `controller` with `reconcile` and `error_policy` until `shutdown`
/// completes (see the module documentation); `kind` names it in logs.
pub async fn drive<K, Ctx, ReconcilerFut>(
    controller: Controller<K>,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> ReconcilerFut,
    error_policy: impl Fn(Arc<K>, &ReconcilerFut::Error, Arc<Ctx>) -> Action,
    ctx: Arc<Ctx>,
    shutdown: impl Future<Output = ()> + Clone + Send + Sync + 'static,
    kind: &'static str,
) where
    K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Debug + Unpin + Hash + Eq + Clone,
    ReconcilerFut: TryFuture<Ok = Action> + Send + 'static,
    ReconcilerFut::Error: std::error::Error + Send + 'static,
    Ctx: Send + Sync + 'static,
{
    let store = controller.store();
    let graceful = {
        let shutdown = shutdown.clone();
        async move {
            shutdown.await;
            if tokio::time::timeout(STORE_READY_WAIT, store.wait_until_ready())
                .await
                .is_err()
            {
                tracing::debug!(kind, "stopping before the first list completed");
            }
        }
    };
    let forced = async move {
        shutdown.await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        tracing::warn!(
            kind,
            grace = ?SHUTDOWN_GRACE,
            "controller still running after the shutdown grace period; cancelling it"
        );
    };
    controller
        .graceful_shutdown_on(graceful)
        .run(reconcile, error_policy, ctx)
        .take_until(forced)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(kind, error = %e, "reconcile");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;
    use kube::{Api, Client, Config};

    use super::*;

    /// A client whose API server refuses every connection: the first list
    /// never completes.
    fn unreachable_client() -> Client {
        let config = Config::new("http://127.0.0.1:9".parse().expect("valid URL"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_before_the_first_list_still_stops() {
        let controller = Controller::new(
            Api::<ConfigMap>::all(unreachable_client()),
            watcher::Config::default(),
        );
        let reconcile = |_: Arc<ConfigMap>, _: Arc<()>| async {
            Ok::<_, std::io::Error>(Action::await_change())
        };
        let shutdown = std::future::ready(()).shared();
        let started = tokio::time::Instant::now();
        let run = drive(
            controller,
            reconcile,
            |_, _, _| Action::await_change(),
            Arc::new(()),
            shutdown,
            "configmap",
        );
        tokio::time::timeout(Duration::from_secs(300), run)
            .await
            .expect("the controller stops");
        assert!(started.elapsed() <= SHUTDOWN_GRACE + Duration::from_secs(1));
    }
}
