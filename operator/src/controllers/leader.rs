//! Leader election through a `coordination.k8s.io/v1` Lease, so that only
//! one operator replica reconciles at a time.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

use super::Clock;

/// Lease settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the holder keeps leading while renewals fail: shorter than
    /// `lease_duration`, so that it has stopped before another replica may
    /// take the expired lease.
    pub renew_deadline: Duration,
    /// How often the holder renews (and candidates retry).
    pub retry_period: Duration,
}

impl LeaderElection {
    /// Settings with the usual timings (15 s lease, 10 s renew deadline,
    /// 2 s retry; those of client-go's leader election).
    pub fn new(namespace: &str, identity: &str) -> LeaderElection {
        LeaderElection {
            lease_name: "flexinfer-operator".to_owned(),
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The same settings for the Lease named `lease_name`.
    pub fn with_lease(mut self, lease_name: &str) -> LeaderElection {
        lease_name.clone_into(&mut self.lease_name);
        self
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(self, client: Client, clock: Arc<dyn Clock>) -> anyhow::Result<HeldLease> {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        loop {
            match try_acquire(&api, &self, clock.now()).await {
                Ok(true) => {
                    tracing::info!(lease = %self.lease_name, identity = %self.identity, "acquired leadership");
                    return Ok(HeldLease {
                        api,
                        settings: self,
                        clock,
                    });
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.retry_period).await;
        }
    }
}

fn micro(t: SystemTime) -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or_default())
}

fn lease_spec(
    le: &LeaderElection,
    now: SystemTime,
    acquired: Option<MicroTime>,
    transitions: i32,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(le.identity.clone()),
        lease_duration_seconds: Some(le.lease_duration.as_secs() as i32),
        acquire_time: Some(acquired.unwrap_or_else(|| micro(now))),
        renew_time: Some(micro(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// One attempt: true when this replica holds the lease afterwards.
async fn try_acquire(
    api: &Api<Lease>,
    le: &LeaderElection,
    now: SystemTime,
) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(&le.lease_name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(le.lease_name.clone()),
                ..Default::default()
            },
            spec: Some(lease_spec(le, now, None, 0)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let expired = spec.renew_time.as_ref().is_none_or(|t| {
        let renewed = SystemTime::from(t.0);
        let valid = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
        renewed + valid <= now
    });
    if holder != le.identity && !holder.is_empty() && !expired {
        return Ok(false);
    }
    let (acquired, transitions) = if holder == le.identity {
        (
            spec.acquire_time.clone(),
            spec.lease_transitions.unwrap_or(0),
        )
    } else {
        (None, spec.lease_transitions.unwrap_or(0) + 1)
    };
    lease.spec = Some(lease_spec(le, now, acquired, transitions));
    match api
        .replace(&le.lease_name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// A lease this replica holds.
pub struct HeldLease {
    api: Api<Lease>,
    settings: LeaderElection,
    clock: Arc<dyn Clock>,
}

impl HeldLease {
    /// Renews the lease every retry period until `stop` fires (then
    /// releases it and returns `Ok`), or returns an error once renewal has
    /// failed for the renew deadline or another replica took it.
    pub async fn keep_renewing(
        self,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) -> anyhow::Result<()> {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = &mut stop => {
                    self.release().await;
                    return Ok(());
                }
                () = tokio::time::sleep(self.settings.retry_period) => {}
            }
            match try_acquire(&self.api, &self.settings, self.clock.now()).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => anyhow::bail!(
                    "leadership lost: lease {} is held by another replica",
                    self.settings.lease_name
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "lease renewal failed");
                    if last_ok.elapsed() >= self.settings.renew_deadline {
                        anyhow::bail!(
                            "leadership lost: could not renew lease {} for {:?}",
                            self.settings.lease_name,
                            self.settings.renew_deadline
                        );
                    }
                }
            }
        }
    }

    async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.lease_name).await {
            if let Some(spec) = lease.spec.as_mut() {
                if spec.holder_identity.as_deref() == Some(self.settings.identity.as_str()) {
                    spec.holder_identity = None;
                    let _ = self
                        .api
                        .replace(&self.settings.lease_name, &PostParams::default(), &lease)
                        .await;
                }
            }
        }
    }
}
