//! Tenant fair share: the optional `tenantAdjustment` term of the score.
//!
//! When enabled (`SCHED_TENANT_FAIRSHARE_ENABLED=true`), a pod's tenant is
//! the value of its `SCHED_TENANT_LABEL_KEY` label, else its namespace. The
//! tenant's GPU use is the pod's own GPU count plus the GPUs of the
//! tenant's other non-terminal pods in the same namespace; the headroom is
//! `1 − used ÷ SCHED_TENANT_FAIRSHARE_BUDGET_GPUS`, weighted by
//! `SCHED_TENANT_FAIRSHARE_WEIGHT` in [`crate::score::raw_score`].
//!
//! The term is the same for every node of one request, so it does not
//! change the order of nodes; it is exported as the gauges
//! `flexinfer_scheduler_tenant_usage_ratio` and
//! `flexinfer_scheduler_tenant_score_adjustment`.

use std::collections::BTreeMap;

use crate::facts::PodFacts;

/// Fair-share settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FairShare {
    /// `SCHED_TENANT_FAIRSHARE_ENABLED`.
    pub enabled: bool,
    /// `SCHED_TENANT_FAIRSHARE_BUDGET_GPUS`.
    pub budget_gpus: f64,
    /// `SCHED_TENANT_LABEL_KEY`; empty means the namespace is the tenant.
    pub tenant_label_key: String,
}

impl FairShare {
    /// Default GPU budget per tenant.
    pub const DEFAULT_BUDGET_GPUS: f64 = 1.0;

    /// Fair share switched off.
    pub fn disabled() -> Self {
        FairShare {
            enabled: false,
            budget_gpus: Self::DEFAULT_BUDGET_GPUS,
            tenant_label_key: String::new(),
        }
    }

    /// The tenant of `pod`.
    pub fn tenant_of<'p>(&self, pod: &'p PodFacts) -> &'p str {
        self.tenant_from(Some(&pod.labels), &pod.namespace)
    }

    /// The tenant of a pod with `labels` in `namespace`: the value of the
    /// tenant label, else the namespace.
    pub fn tenant_from<'p>(
        &self,
        labels: Option<&'p BTreeMap<String, String>>,
        namespace: &'p str,
    ) -> &'p str {
        if self.tenant_label_key.is_empty() {
            return namespace;
        }
        labels
            .and_then(|labels| labels.get(&self.tenant_label_key))
            .map(String::as_str)
            .filter(|tenant| !tenant.is_empty())
            .unwrap_or(namespace)
    }
}

impl Default for FairShare {
    fn default() -> Self {
        Self::disabled()
    }
}

/// GPU use of tenants.
pub trait TenantUsage: Send + Sync {
    /// GPUs requested by the non-terminal pods of `namespace` whose tenant
    /// is `tenant` (per `settings`), not counting the pod with UID
    /// `exclude_uid`.
    fn used_gpus(
        &self,
        settings: &FairShare,
        namespace: &str,
        tenant: &str,
        exclude_uid: &str,
    ) -> f64;
}

/// No pods known: every tenant uses nothing but the pod being scheduled.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTenantUsage;

impl TenantUsage for NoTenantUsage {
    fn used_gpus(&self, _: &FairShare, _: &str, _: &str, _: &str) -> f64 {
        0.0
    }
}

/// The fair-share outcome for one pod.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantShare {
    /// GPUs in use by the tenant, the pod included.
    pub used_gpus: f64,
    /// `used ÷ budget`.
    pub usage_ratio: f64,
    /// `1 − usage_ratio`; the unweighted score term.
    pub headroom: f64,
}

/// The share of `pod`'s tenant, `None` when fair share is disabled or the
/// budget is not positive.
pub fn share(settings: &FairShare, usage: &dyn TenantUsage, pod: &PodFacts) -> Option<TenantShare> {
    if !settings.enabled || settings.budget_gpus <= 0.0 || !settings.budget_gpus.is_finite() {
        return None;
    }
    let tenant = settings.tenant_of(pod);
    let used = pod.gpu_count + usage.used_gpus(settings, &pod.namespace, tenant, &pod.uid);
    let ratio = used / settings.budget_gpus;
    Some(TenantShare {
        used_gpus: used,
        usage_ratio: ratio,
        headroom: 1.0 - ratio,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(f64);

    impl TenantUsage for Fixed {
        fn used_gpus(&self, _: &FairShare, _: &str, _: &str, _: &str) -> f64 {
            self.0
        }
    }

    fn pod(gpus: f64) -> PodFacts {
        PodFacts {
            namespace: "team-a".into(),
            gpu_count: gpus,
            labels: BTreeMap::from([("tenant".to_owned(), "blue".to_owned())]),
            ..Default::default()
        }
    }

    #[test]
    fn disabled_fair_share_has_no_share() {
        assert_eq!(share(&FairShare::disabled(), &Fixed(3.0), &pod(1.0)), None);
        let zero_budget = FairShare {
            enabled: true,
            budget_gpus: 0.0,
            ..FairShare::disabled()
        };
        assert_eq!(share(&zero_budget, &Fixed(3.0), &pod(1.0)), None);
    }

    #[test]
    fn headroom_is_one_minus_used_over_budget() {
        let settings = FairShare {
            enabled: true,
            budget_gpus: 4.0,
            tenant_label_key: String::new(),
        };
        let share = share(&settings, &Fixed(1.0), &pod(1.0)).unwrap();
        assert_eq!(share.used_gpus, 2.0);
        assert_eq!(share.usage_ratio, 0.5);
        assert_eq!(share.headroom, 0.5);
        let over = super::share(&settings, &Fixed(7.0), &pod(1.0)).unwrap();
        assert_eq!(over.headroom, -1.0);
    }

    #[test]
    fn tenant_is_the_label_else_the_namespace() {
        let by_label = FairShare {
            enabled: true,
            budget_gpus: 1.0,
            tenant_label_key: "tenant".into(),
        };
        assert_eq!(by_label.tenant_of(&pod(1.0)), "blue");
        let missing = FairShare {
            tenant_label_key: "team".into(),
            ..by_label.clone()
        };
        assert_eq!(missing.tenant_of(&pod(1.0)), "team-a");
        assert_eq!(FairShare::disabled().tenant_of(&pod(1.0)), "team-a");
    }
}
